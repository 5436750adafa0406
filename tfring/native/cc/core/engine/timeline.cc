#include "engine/timeline.h"

#include <cerrno>
#include <cstring>

#include "status.h"

namespace tfring {
namespace {

long long micros(Timeline::Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string laneName(int lane) { return lane == Timeline::kSubmitted ? "submitted" : "engine"; }

}  // namespace

std::string rankPath(const std::string& path, int rank) {
  const std::string tag = ".rank" + std::to_string(rank);
  const std::string ext = ".json";
  if (path.size() > ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0) {
    return path.substr(0, path.size() - ext.size()) + tag + ext;
  }
  return path + tag + ext;
}

Timeline::Timeline(const std::string& path, int rank) : rank_(rank) {
  if (path.empty()) return;
  const std::string file = rankPath(path, rank);
  file_ = std::fopen(file.c_str(), "w");
  if (!file_) {
    throw Error(Code::kInvalidArgument, "timeline: cannot write " + file + ": " + std::strerror(errno));
  }
  std::fputs("[\n", file_);
  for (int lane : {kSubmitted, kEngine}) {
    write("{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + std::to_string(rank) + ",\"tid\":" +
          std::to_string(lane) + ",\"args\":{\"name\":" + quoted(laneName(lane)) + "}}");
  }
  write("{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + std::to_string(rank) + ",\"args\":{\"name\":" +
        quoted("rank " + std::to_string(rank)) + "}}");
}

Timeline::~Timeline() {
  if (!file_) return;
  std::fputs("\n]\n", file_);
  std::fclose(file_);
}

void Timeline::write(const std::string& event) {
  std::lock_guard<std::mutex> lock(mu_);
  std::fputs(first_ ? "" : ",\n", file_);
  std::fputs(event.c_str(), file_);
  std::fflush(file_);  // a rank that is killed still leaves every event it saw (without the closing "]")
  first_ = false;
}

void Timeline::instant(const std::string& name, Lane lane, const std::string& detail) {
  if (!file_) return;
  write("{\"ph\":\"i\",\"s\":\"t\",\"name\":" + quoted(name) + ",\"pid\":" + std::to_string(rank_) +
        ",\"tid\":" + std::to_string(lane) + ",\"ts\":" + std::to_string(micros(Clock::now())) +
        ",\"args\":{\"what\":" + quoted(detail) + "}}");
}

void Timeline::span(const std::string& name, Lane lane, Clock::time_point start, Clock::time_point end,
                    const std::string& detail) {
  if (!file_) return;
  write("{\"ph\":\"X\",\"name\":" + quoted(name) + ",\"pid\":" + std::to_string(rank_) + ",\"tid\":" +
        std::to_string(lane) + ",\"ts\":" + std::to_string(micros(start)) +
        ",\"dur\":" + std::to_string(micros(end) - micros(start)) + ",\"args\":{\"what\":" + quoted(detail) + "}}");
}

}  // namespace tfring
