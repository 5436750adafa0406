// Packing many tensors into a fusion buffer (and back) in one launch: blockIdx.y walks the
// entries, blockIdx.x and the threads walk each entry's bytes (16 bytes at a time when aligned).
#include "cuda_kernels.h"
#include "device_math.cuh"

namespace tfring {
namespace cuda {
namespace {

__device__ void copyBytes(char* dst, const char* src, size_t bytes) {
  const size_t start = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  if ((reinterpret_cast<uintptr_t>(dst) & 15) == 0 && (reinterpret_cast<uintptr_t>(src) & 15) == 0) {
    const size_t vectors = bytes / 16;
    for (size_t i = start; i < vectors; i += stride) reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
    for (size_t i = vectors * 16 + start; i < bytes; i += stride) dst[i] = src[i];
  } else {
    for (size_t i = start; i < bytes; i += stride) dst[i] = src[i];
  }
}

template <bool kPack>
__global__ void packKernel(char* buffer, const PackEntry* entries, int count) {
  for (int e = blockIdx.y; e < count; e += gridDim.y) {
    PackEntry entry = entries[e];
    char* tensor = static_cast<char*>(entry.tensor);
    if (kPack) {
      copyBytes(buffer + entry.offset, tensor, entry.bytes);
    } else {
      copyBytes(tensor, buffer + entry.offset, entry.bytes);
    }
  }
}

template <bool kPack>
cudaError_t launch(char* buffer, const PackEntry* entries, int count, size_t maxBytes, cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  size_t perEntry = (maxBytes / 16 + kThreads - 1) / kThreads;
  dim3 grid(static_cast<unsigned>(perEntry < 1 ? 1 : (perEntry > 64 ? 64 : perEntry)),
            static_cast<unsigned>(count < 65535 ? count : 65535));
  packKernel<kPack><<<grid, kThreads, 0, stream>>>(buffer, entries, count);
  return cudaGetLastError();
}

}  // namespace

cudaError_t pack(void* buffer, const PackEntry* entries, int count, size_t maxBytes, cudaStream_t stream) {
  return launch<true>(static_cast<char*>(buffer), entries, count, maxBytes, stream);
}

cudaError_t unpack(const void* buffer, const PackEntry* entries, int count, size_t maxBytes, cudaStream_t stream) {
  return launch<false>(const_cast<char*>(static_cast<const char*>(buffer)), entries, count, maxBytes, stream);
}

}  // namespace cuda
}  // namespace tfring
