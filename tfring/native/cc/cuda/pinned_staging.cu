#include "pinned_staging.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

namespace tfring {
namespace cuda {
namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw Error(Code::kInternal, std::string("tfring GPU staging: ") + what + ": " + cudaGetErrorString(status));
  }
}

// Calls fn(tensor, offsetInTensor, offsetInPiece, length) for every part of [begin, end) of the
// tensors' logical concatenation.
template <typename F>
void forEachPart(const std::vector<DeviceTensor>& tensors, size_t begin, size_t end, F fn) {
  size_t at = 0;
  for (const auto& t : tensors) {
    const size_t lo = std::max(begin, at), hi = std::min(end, at + t.bytes);
    if (lo < hi) fn(t, lo - at, lo - begin, hi - lo);
    at += t.bytes;
    if (at >= end) break;
  }
}

}  // namespace

PinnedStaging::PinnedStaging(size_t pieceBytes, int device) : pieceBytes_(pieceBytes), device_(device) {
  if (pieceBytes_ == 0) throw Error(Code::kInvalidArgument, "tfring GPU staging: pieceBytes must be > 0");
}

PinnedStaging::~PinnedStaging() {
  if (!ready_) return;
  cudaSetDevice(device_);
  cudaStreamSynchronize(down_);
  cudaStreamSynchronize(up_);
  for (int s = 0; s < kSlots; ++s) {
    cudaFreeHost(slots_[s]);
    cudaEventDestroy(arrived_[s]);
    cudaEventDestroy(returned_[s]);
  }
  cudaEventDestroy(inputsReady_);
  cudaStreamDestroy(down_);
  cudaStreamDestroy(up_);
}

void PinnedStaging::setUp() {
  if (device_ < 0) check(cudaGetDevice(&device_), "cudaGetDevice");
  check(cudaSetDevice(device_), "cudaSetDevice");
  check(cudaStreamCreateWithFlags(&down_, cudaStreamNonBlocking), "cudaStreamCreate");
  check(cudaStreamCreateWithFlags(&up_, cudaStreamNonBlocking), "cudaStreamCreate");
  check(cudaEventCreateWithFlags(&inputsReady_, cudaEventDisableTiming), "cudaEventCreate");
  for (int s = 0; s < kSlots; ++s) {
    check(cudaHostAlloc(&slots_[s], pieceBytes_, cudaHostAllocPortable), "cudaHostAlloc");
    check(cudaEventCreateWithFlags(&arrived_[s], cudaEventDisableTiming), "cudaEventCreate");
    check(cudaEventCreateWithFlags(&returned_[s], cudaEventDisableTiming), "cudaEventCreate");
  }
  ready_ = true;
}

void PinnedStaging::copyDown(const std::vector<DeviceTensor>& tensors, size_t k, size_t begin, size_t end) {
  const int s = static_cast<int>(k % kSlots);
  // The slot's previous piece (k - 3) must be back on the device before it is overwritten.
  if (k >= kSlots) check(cudaStreamWaitEvent(down_, returned_[s], 0), "cudaStreamWaitEvent");
  char* slot = static_cast<char*>(slots_[s]);
  forEachPart(tensors, begin, end, [&](const DeviceTensor& t, size_t inTensor, size_t inPiece, size_t n) {
    check(cudaMemcpyAsync(slot + inPiece, static_cast<const char*>(t.in) + inTensor, n, cudaMemcpyDeviceToHost, down_),
          "cudaMemcpyAsync (device to host)");
  });
  check(cudaEventRecord(arrived_[s], down_), "cudaEventRecord");
}

void PinnedStaging::copyUp(const std::vector<DeviceTensor>& tensors, size_t k, size_t begin, size_t end) {
  const int s = static_cast<int>(k % kSlots);
  const char* slot = static_cast<const char*>(slots_[s]);
  forEachPart(tensors, begin, end, [&](const DeviceTensor& t, size_t inTensor, size_t inPiece, size_t n) {
    check(cudaMemcpyAsync(static_cast<char*>(t.out) + inTensor, slot + inPiece, n, cudaMemcpyHostToDevice, up_),
          "cudaMemcpyAsync (host to device)");
  });
  check(cudaEventRecord(returned_[s], up_), "cudaEventRecord");
}

void PinnedStaging::wait(cudaEvent_t event, Deadline deadline, const char* what) {
  // Polling rather than cudaEventSynchronize: that one cannot time out.
  for (int spins = 0;; ++spins) {
    cudaError_t status = cudaEventQuery(event);
    if (status == cudaSuccess) return;
    if (status != cudaErrorNotReady) check(status, what);
    if (deadline.expired()) {
      throw Error(Code::kDeadlineExceeded, std::string("tfring GPU staging: ") + what + " did not finish in time");
    }
    if (spins < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

void PinnedStaging::run(const std::vector<DeviceTensor>& tensors, size_t elementBytes, cudaStream_t producer,
                        const HostCollective& collective, Deadline deadline) {
  if (elementBytes == 0 || pieceBytes_ < elementBytes) {
    throw Error(Code::kInvalidArgument, "tfring GPU staging: a piece must hold at least one element");
  }
  if (!ready_) setUp();
  check(cudaSetDevice(device_), "cudaSetDevice");
  size_t total = 0;
  for (const auto& t : tensors) {
    if (t.bytes % elementBytes != 0) {
      throw Error(Code::kInvalidArgument, "tfring GPU staging: a tensor of " + std::to_string(t.bytes) +
                                              " bytes is not a whole number of " + std::to_string(elementBytes) +
                                              "-byte elements");
    }
    total += t.bytes;
  }
  if (total == 0) return;
  const size_t piece = pieceBytes_ / elementBytes * elementBytes;
  const size_t pieces = (total + piece - 1) / piece;
  auto range = [&](size_t k) { return std::make_pair(k * piece, std::min(total, (k + 1) * piece)); };

  // Read the inputs, and write the outputs, only after what the producer queued before this call:
  // the framework may have handed us buffers that its pending kernels still use.
  check(cudaEventRecord(inputsReady_, producer), "cudaEventRecord");
  check(cudaStreamWaitEvent(down_, inputsReady_, 0), "cudaStreamWaitEvent");
  check(cudaStreamWaitEvent(up_, inputsReady_, 0), "cudaStreamWaitEvent");
  try {
    for (size_t k = 0; k < std::min<size_t>(2, pieces); ++k) copyDown(tensors, k, range(k).first, range(k).second);
    for (size_t k = 0; k < pieces; ++k) {
      const auto [begin, end] = range(k);
      const int s = static_cast<int>(k % kSlots);
      wait(arrived_[s], deadline, "copying a piece to the host");
      collective(slots_[s], end - begin);
      copyUp(tensors, k, begin, end);
      if (k + 2 < pieces) copyDown(tensors, k + 2, range(k + 2).first, range(k + 2).second);
    }
    wait(returned_[(pieces - 1) % kSlots], deadline, "copying the results to the device");
  } catch (...) {
    // Let the copies in flight finish before the caller frees or reuses the tensors.
    const Deadline grace = Deadline::after(10);
    for (cudaEvent_t e : {arrived_[0], arrived_[1], arrived_[2], returned_[0], returned_[1], returned_[2]}) {
      while (cudaEventQuery(e) == cudaErrorNotReady && !grace.expired()) std::this_thread::yield();
    }
    throw;
  }
}

}  // namespace cuda
}  // namespace tfring
