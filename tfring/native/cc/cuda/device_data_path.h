// How a collective reaches tensors in GPU memory. The ring itself runs on the host (core/), over
// the host collective that the engine hands to a staged request (core/engine.h, Request::staged);
// a DeviceDataPath moves the device tensors to and from it. Framework-free: no TensorFlow here.
//
// Implementations:
//   PinnedStaging (pinned_staging.h)  through pinned host memory, copies overlapped with the ring.
//   Later: CUDA IPC between ranks on one host (cudaIpcGetMemHandle on each rank's buffer, exchanged
//   through the rendezvous store, and the reduction done by kernels that read the peer's memory),
//   which would skip the host altogether. It fits behind the same run(): one logical buffer made of
//   device tensors, the collective's order fixed by the engine.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include "common.h"
#include "engine/engine.h"

namespace tfring {
namespace cuda {

// One tensor of a collective in device memory. `out` may equal `in` (in place).
struct DeviceTensor {
  const void* in = nullptr;
  void* out = nullptr;
  size_t bytes = 0;
};

class DeviceDataPath {
 public:
  virtual ~DeviceDataPath() = default;
  virtual const char* name() const = 0;

  // Runs `collective` over the logical concatenation of `tensors`, reading them after the work
  // queued so far on `producer` (the framework's compute stream) and writing the results to their
  // `out`. Pieces handed to `collective` are whole elements of `elementBytes`, and their sizes
  // depend only on the tensors' sizes, so every rank makes the same calls. On return the outputs
  // are written (the copies have completed). Throws tfring::Error on a CUDA error or when a copy
  // does not finish by `deadline`; rethrows what `collective` throws, after the copies in flight
  // have stopped touching the tensors.
  virtual void run(const std::vector<DeviceTensor>& tensors, size_t elementBytes, cudaStream_t producer,
                   const HostCollective& collective, Deadline deadline) = 0;
};

}  // namespace cuda
}  // namespace tfring
