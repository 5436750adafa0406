#include "config.h"

#include <sstream>

#include "common.h"

namespace tfring {
namespace {

int toInt(const std::string& key, const std::string& v) {
  try {
    size_t used = 0;
    long long x = std::stoll(v, &used);
    if (used != v.size()) throw std::invalid_argument(v);
    return static_cast<int>(x);
  } catch (const std::exception&) {
    throw Error(Code::kInvalidArgument, "config: " + key + " must be an integer, got '" + v + "'");
  }
}

double toDouble(const std::string& key, const std::string& v) {
  try {
    size_t used = 0;
    double x = std::stod(v, &used);
    if (used != v.size() || !(x > 0)) throw std::invalid_argument(v);
    return x;
  } catch (const std::exception&) {
    throw Error(Code::kInvalidArgument, "config: " + key + " must be a positive number, got '" + v + "'");
  }
}

}  // namespace

Config Config::parse(const std::string& text) {
  Config c;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto eq = line.find('=');
    if (eq == std::string::npos) throw Error(Code::kInvalidArgument, "config: bad line '" + line + "'");
    std::string k = line.substr(0, eq), v = line.substr(eq + 1);
    if (k == "rank") c.rank = toInt(k, v);
    else if (k == "size") c.size = toInt(k, v);
    else if (k == "local_rank") c.localRank = toInt(k, v);
    else if (k == "local_size") c.localSize = toInt(k, v);
    else if (k == "store_host") c.storeHost = v;
    else if (k == "store_port") c.storePort = toInt(k, v);
    else if (k == "secret") c.secret = v;
    else if (k == "job_id") c.jobId = v;
    else if (k == "advertise_host") c.advertiseHost = v;
    else if (k == "rendezvous_timeout") c.rendezvousTimeout = toDouble(k, v);
    else if (k == "timeout") c.collectiveTimeout = toDouble(k, v);
    else if (k == "transport") c.transport = v;
    else if (k == "single_copy") c.singleCopy = v == "1" || v == "true";
    else if (k == "fusion_threshold_bytes") {
      long long x = std::stoll(v);
      if (x < 0) throw Error(Code::kInvalidArgument, "config: fusion_threshold_bytes must be >= 0");
      c.fusionThresholdBytes = static_cast<size_t>(x);
    } else {
      throw Error(Code::kInvalidArgument, "config: unknown key '" + k + "'");
    }
  }
  if (c.size < 1) throw Error(Code::kInvalidArgument, "config: size must be >= 1");
  if (c.rank < 0 || c.rank >= c.size) {
    throw Error(Code::kInvalidArgument, "config: rank " + std::to_string(c.rank) +
                                            " is outside [0, " + std::to_string(c.size) + ")");
  }
  if (c.transport != "auto" && c.transport != "shm" && c.transport != "tcp") {
    throw Error(Code::kInvalidArgument, "config: transport must be auto, shm or tcp, got '" + c.transport + "'");
  }
  if (c.size > 1 && c.storePort <= 0) {
    throw Error(Code::kInvalidArgument, "config: a job of several ranks needs the store port of rank 0");
  }
  return c;
}

std::string Config::describe() const {
  std::ostringstream s;
  s << "rank " << rank << "/" << size << " (local " << localRank << "/" << localSize << "), store "
    << storeHost << ":" << storePort << ", transport " << transport;
  return s.str();
}

}  // namespace tfring
