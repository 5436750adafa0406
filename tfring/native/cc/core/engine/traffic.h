// What this rank's engine has run since init, per kind of collective: how many collectives
// finished, how many bytes of input they carried, and how long this rank waited in their
// agreement step for the other ranks to arrive. Read by tfring.traffic() (the benchmarks' and the
// tests' measure of traffic, e.g. one gradient allreduce per accumulated step) and by
// tfring.callbacks.StragglerReport (a rank that waits least is the one the others wait for).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

#include "engine/request.h"

namespace tfring {

class Traffic {
 public:
  static constexpr int kKinds = static_cast<int>(OpKind::kJoin) + 1;

  // Counts a collective that finished without error.
  void count(const Request& r) {
    const int k = static_cast<int>(r.kind);
    int64_t bytes = 0;
    for (const auto& t : r.tensors) bytes += static_cast<int64_t>(t.bytes);
    calls_[k].fetch_add(1, std::memory_order_relaxed);
    bytes_[k].fetch_add(bytes, std::memory_order_relaxed);
  }
  // Time spent waiting for the other ranks at the start of a collective of kind `k`.
  void waited(OpKind k, int64_t nanoseconds) {
    waitedNs_[static_cast<int>(k)].fetch_add(nanoseconds, std::memory_order_relaxed);
  }
  int64_t calls(OpKind k) const { return calls_[static_cast<int>(k)].load(std::memory_order_relaxed); }
  int64_t waitedNs(OpKind k) const { return waitedNs_[static_cast<int>(k)].load(std::memory_order_relaxed); }
  int64_t bytes(OpKind k) const { return bytes_[static_cast<int>(k)].load(std::memory_order_relaxed); }

 private:
  std::array<std::atomic<int64_t>, kKinds> calls_{}, bytes_{}, waitedNs_{};
};

}  // namespace tfring
