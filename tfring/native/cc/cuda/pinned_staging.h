// PinnedStaging: the ring over GPU tensors, staged through pinned host memory.
//
// The device tensors form one logical buffer, cut into pieces of at most `pieceBytes`. Three
// pinned slots rotate: while the host collective works on piece k (in slot k mod 3), piece k+1 is
// being copied down from the device on one stream and piece k-1 back up on another. CUDA events
// order the GPU side (a slot is refilled only after its previous piece went back up); the host
// waits only for "piece k has arrived" and, at the end, for "every piece is back".
//
// Cost for N bytes: about max(copy down, collective, copy up) per piece × N / pieceBytes, plus one
// piece's copies at each end; the copies (55 GB/s each way on an H200, measured) are usually
// faster than a CPU ring, so the ring's time is what remains. Pinned memory is allocated once, on
// first use (3 × pieceBytes), and reused.
//
// On an error (the deadline, a failed collective) run() throws only once the copies it queued
// have finished, so the caller may free the tensors at once; it waits for them at most 10 s.
// A producer still busy at the deadline delays the error until it finishes, within that bound.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include "device_data_path.h"

namespace tfring {
namespace cuda {

class PinnedStaging : public DeviceDataPath {
 public:
  static constexpr size_t kDefaultPieceBytes = size_t{4} << 20;

  // `device`: the CUDA device of the tensors; -1 = the device current when run() is first called.
  explicit PinnedStaging(size_t pieceBytes = kDefaultPieceBytes, int device = -1);
  ~PinnedStaging() override;
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;

  const char* name() const override { return "pinned-staging"; }
  void run(const std::vector<DeviceTensor>& tensors, size_t elementBytes, cudaStream_t producer,
           const HostCollective& collective, Deadline deadline) override;

 private:
  static constexpr int kSlots = 3;
  void setUp();
  // Copies piece `k` ([begin, end) of the logical buffer) between the tensors and slot k % 3.
  void copyDown(const std::vector<DeviceTensor>& tensors, size_t k, size_t begin, size_t end);
  void copyUp(const std::vector<DeviceTensor>& tensors, size_t k, size_t begin, size_t end);
  // Waits for `event` on the host, polling, until `deadline`.
  void wait(cudaEvent_t event, Deadline deadline, const char* what);

  size_t pieceBytes_;
  int device_;
  bool ready_ = false;
  void* slots_[kSlots] = {};
  cudaStream_t down_ = nullptr, up_ = nullptr;
  cudaEvent_t inputsReady_ = nullptr;
  cudaEvent_t arrived_[kSlots] = {};   // piece in the slot is on the host
  cudaEvent_t returned_[kSlots] = {};  // piece in the slot is back on the device
};

}  // namespace cuda
}  // namespace tfring
