// Types shared by every part of the core: errors (codes from error_code.h) and deadlines;
// status.h carries an error as a value, data_type.h names element types and reduce ops.
// Nothing here knows about TensorFlow; the kernels translate these into TF types.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "error_code.h"

namespace tfring {

// What the core throws: a code and a message that says what, where and what to do.
class Error : public std::runtime_error {
 public:
  Error(Code code, const std::string& what) : std::runtime_error(what), code_(code) {}
  Code code() const { return code_; }

 private:
  Code code_;
};

// A peer went away or stopped answering. `rank` is the peer's rank (-1: unknown).
class PeerError : public Error {
 public:
  PeerError(int rank, const std::string& what) : Error(Code::kUnavailable, what), rank_(rank) {}
  int rank() const { return rank_; }

 private:
  int rank_;
};

using Clock = std::chrono::steady_clock;

// How often a long wait (for the rendezvous store, for ranks to join) says on stderr what it is
// waiting for. Not a deadline: the waits end at theirs.
constexpr double kReportEverySeconds = 10.0;

// An absolute point in time after which a blocking call gives up. Every blocking call in the
// core takes one, so nothing can wait forever.
class Deadline {
 public:
  static Deadline after(double seconds) {
    return Deadline(Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(seconds)));
  }
  explicit Deadline(Clock::time_point t) : t_(t) {}
  bool expired() const { return Clock::now() >= t_; }
  // Milliseconds left, clamped to [0, cap_ms].
  int remainingMs(int cap_ms = 1 << 30) const {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(t_ - Clock::now()).count();
    if (left < 0) return 0;
    return left > cap_ms ? cap_ms : static_cast<int>(left);
  }
  Clock::time_point time() const { return t_; }

 private:
  Clock::time_point t_;
};

// The position `x` steps around a ring of `size` (x may be negative): the ring algorithms' index.
inline int ringIndex(int x, int size) { return ((x % size) + size) % size; }

}  // namespace tfring
