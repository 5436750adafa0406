// A Chrome-trace / Perfetto JSON file of one rank's collectives (TFRING_TIMELINE), to see where a
// step's communication time goes: when each collective was submitted, how long it waited for the
// other ranks (the agreement step every collective starts with), and how long its data took.
//
// Open the files in ui.perfetto.dev or chrome://tracing; every rank writes its own (the path with
// ".rank<R>" before ".json"), timestamps are wall-clock microseconds so ranks' files line up.
// Lanes (tid): 1 "submitted" (instants, from the framework's threads), 2 "engine" (each collective,
// with its "wait for peers" and "move data" spans nested inside it, and inside "move data" an
// allreduce's phases: "pack", "reduce-scatter", "allgather", "unpack" per fusion pass).
#pragma once

#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>

namespace tfring {

class Timeline {
 public:
  using Clock = std::chrono::system_clock;
  enum Lane { kSubmitted = 1, kEngine = 2 };

  // `path` "" turns it off; otherwise the file is opened (truncated) now. Throws Error naming the
  // file when it cannot be.
  Timeline(const std::string& path, int rank);
  ~Timeline();
  bool on() const { return file_ != nullptr; }
  void instant(const std::string& name, Lane lane, const std::string& detail);
  void span(const std::string& name, Lane lane, Clock::time_point start, Clock::time_point end,
            const std::string& detail);

 private:
  void write(const std::string& event);

  std::mutex mu_;
  std::FILE* file_ = nullptr;
  int rank_;
  bool first_ = true;
};

// Spans of consecutive phases on the engine lane: mark(name) ends the phase that began at the
// previous mark (or at construction). Costs one check per mark when the timeline is off.
class PhaseSpans {
 public:
  PhaseSpans(Timeline& timeline, const std::string& detail)
      : timeline_(timeline), detail_(timeline.on() ? detail : std::string()), last_(Timeline::Clock::now()) {}
  void mark(const char* name) {
    if (!timeline_.on()) return;
    const auto now = Timeline::Clock::now();
    timeline_.span(name, Timeline::kEngine, last_, now, detail_);
    last_ = now;
  }

 private:
  Timeline& timeline_;
  std::string detail_;
  Timeline::Clock::time_point last_;
};

// "trace.json" -> "trace.rank3.json"; "trace" -> "trace.rank3.json".
std::string rankPath(const std::string& path, int rank);

}  // namespace tfring
