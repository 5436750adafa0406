// What this rank's engine has run since init, per kind of collective: how many collectives
// finished and how many bytes of input they carried. Read by tfring.traffic() (the benchmarks'
// and the tests' measure of traffic, e.g. one gradient allreduce per accumulated step).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

#include "engine/request.h"

namespace tfring {

class Traffic {
 public:
  static constexpr int kKinds = static_cast<int>(OpKind::kBarrier) + 1;

  // Counts a collective that finished without error.
  void count(const Request& r) {
    const int k = static_cast<int>(r.kind);
    int64_t bytes = 0;
    for (const auto& t : r.tensors) bytes += static_cast<int64_t>(t.bytes);
    calls_[k].fetch_add(1, std::memory_order_relaxed);
    bytes_[k].fetch_add(bytes, std::memory_order_relaxed);
  }
  int64_t calls(OpKind k) const { return calls_[static_cast<int>(k)].load(std::memory_order_relaxed); }
  int64_t bytes(OpKind k) const { return bytes_[static_cast<int>(k)].load(std::memory_order_relaxed); }

 private:
  std::array<std::atomic<int64_t>, kKinds> calls_{}, bytes_{};
};

}  // namespace tfring
