#include "config.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <vector>

#include "common.h"

namespace tfring {
namespace {

[[noreturn]] void badValue(const std::string& key, const char* type, const std::string& v) {
  throw Error(Code::kInvalidArgument, "config: " + key + " must be " + type + ", got '" + v + "'");
}

// The whole of `v` as a T (from_chars: no locale, no leading spaces or '+', no partial reads).
template <typename T>
bool parseNumber(const std::string& v, T* out) {
  const char* end = v.data() + v.size();
  auto [ptr, ec] = std::from_chars(v.data(), end, *out);
  return !v.empty() && ec == std::errc() && ptr == end;
}

template <auto Member>
void setInt(Config& c, const std::string& k, const std::string& v) {
  if (!parseNumber(v, &(c.*Member))) badValue(k, "an integer", v);
}

// Seconds through strtod: floating-point from_chars needs g++ 11, and the library is built with
// the user's compiler. The record is written by Python in the C locale ("60.0", "1e-05").
template <auto Member>
void setSeconds(Config& c, const std::string& k, const std::string& v) {
  char* end = nullptr;
  errno = 0;
  const double x = v.empty() ? 0 : std::strtod(v.c_str(), &end);
  if (v.empty() || errno != 0 || end != v.c_str() + v.size() || !std::isfinite(x)) badValue(k, "a number of seconds", v);
  c.*Member = x;
}

template <auto Member>
void setText(Config& c, const std::string&, const std::string& v) {
  c.*Member = v;
}

// Text without whitespace: it travels in space-separated records (the rendezvous endpoint).
template <auto Member>
void setWord(Config& c, const std::string& k, const std::string& v) {
  if (v.find_first_of(" \t\r\v\f") != std::string::npos) badValue(k, "text without spaces", v);
  c.*Member = v;
}

template <auto Member>
void setFlag(Config& c, const std::string& k, const std::string& v) {
  if (v != "0" && v != "1") badValue(k, "0 or 1", v);
  c.*Member = v == "1";
}

void setTransport(Config& c, const std::string& k, const std::string& v) {
  if (v != "auto" && v != "shm" && v != "tcp") badValue(k, "auto, shm or tcp", v);
  c.transport = v;
}

void setAllreduceAlgorithm(Config& c, const std::string& k, const std::string& v) {
  if (v != "auto" && v != "ring" && v != "hierarchical") badValue(k, "auto, ring or hierarchical", v);
  c.allreduceAlgorithm = v;
}

void setFusionThreshold(Config& c, const std::string& k, const std::string& v) {
  uint64_t bytes = 0;  // unsigned: a '-' does not parse
  if (!parseNumber(v, &bytes)) badValue(k, "a whole number of bytes", v);
  c.fusionThresholdBytes = static_cast<size_t>(bytes);
}

struct Field {
  const char* key;
  void (*set)(Config&, const std::string& key, const std::string& value);
};

// Every key of the record, each exactly once.
const Field kFields[] = {
    {"rank", setInt<&Config::rank>},
    {"size", setInt<&Config::size>},
    {"local_rank", setInt<&Config::localRank>},
    {"local_size", setInt<&Config::localSize>},
    {"store_host", setText<&Config::storeHost>},
    {"store_port", setInt<&Config::storePort>},
    {"secret", setText<&Config::secret>},
    {"job_id", setText<&Config::jobId>},
    {"advertise_host", setText<&Config::advertiseHost>},
    {"rendezvous_timeout", setSeconds<&Config::rendezvousTimeout>},
    {"timeout", setSeconds<&Config::collectiveTimeout>},
    {"transport", setTransport},
    {"single_copy", setFlag<&Config::singleCopy>},
    {"fusion_threshold_bytes", setFusionThreshold},
    {"store_request_timeout", setSeconds<&Config::storeRequestTimeout>},
    {"store_auth_timeout", setSeconds<&Config::storeAuthTimeout>},
    {"store_frame_timeout", setSeconds<&Config::storeFrameTimeout>},
    {"mixed_ring", setFlag<&Config::mixedRing>},
    {"host_id", setWord<&Config::hostId>},
    {"allreduce_algorithm", setAllreduceAlgorithm},
    {"stall_warning", setSeconds<&Config::stallWarning>},
    {"timeline", setText<&Config::timeline>},
};
constexpr size_t kFieldCount = sizeof(kFields) / sizeof(kFields[0]);

size_t fieldIndex(const std::string& key) {
  for (size_t i = 0; i < kFieldCount; ++i) {
    if (key == kFields[i].key) return i;
  }
  throw Error(Code::kInvalidArgument, "config: unknown key '" + key + "'");
}

void checkComplete(const std::vector<bool>& seen) {
  std::string missing;
  for (size_t i = 0; i < kFieldCount; ++i) {
    if (!seen[i]) missing += std::string(missing.empty() ? "" : ", ") + kFields[i].key;
  }
  if (!missing.empty()) throw Error(Code::kInvalidArgument, "config: the record lacks " + missing);
}

}  // namespace

Config Config::parse(const std::string& text) {
  Config c;
  std::vector<bool> seen(kFieldCount, false);
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;  // the record's final newline
    const size_t eq = line.find('=');
    if (eq == std::string::npos) throw Error(Code::kInvalidArgument, "config: bad line '" + line + "' (no '=')");
    const std::string key = line.substr(0, eq);
    const size_t i = fieldIndex(key);
    if (seen[i]) throw Error(Code::kInvalidArgument, "config: key '" + key + "' appears twice");
    seen[i] = true;
    kFields[i].set(c, key, line.substr(eq + 1));
  }
  checkComplete(seen);
  return c;
}

std::string Config::describe() const {
  std::ostringstream s;
  s << "rank " << rank << "/" << size << " (local " << localRank << "/" << localSize << "), store "
    << storeHost << ":" << storePort << ", transport " << transport;
  return s.str();
}

}  // namespace tfring
