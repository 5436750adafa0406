// Device-side helpers shared by the kernels: 16-bit float conversions (round to nearest even, as
// core/reduce.cc does on the CPU) and the launch geometry.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace tfring {
namespace cuda {

constexpr int kThreads = 256;

__device__ __forceinline__ float halfBitsToFloat(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ uint16_t floatToHalfBits(float f) { return __half_as_ushort(__float2half_rn(f)); }
__device__ __forceinline__ float bf16BitsToFloat(uint16_t b) { return __bfloat162float(__ushort_as_bfloat16(b)); }
__device__ __forceinline__ uint16_t floatToBf16Bits(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }

// Enough blocks to fill the device a few times over; loops are grid-stride.
inline int gridFor(size_t work, int threads = kThreads) {
  static int sms = 0;
  if (sms == 0) {
    int device = 0;
    cudaGetDevice(&device);
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms <= 0) sms = 80;
  }
  size_t blocks = (work + threads - 1) / threads;
  size_t cap = static_cast<size_t>(sms) * 16;
  return static_cast<int>(blocks < cap ? (blocks > 0 ? blocks : 1) : cap);
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace cuda
}  // namespace tfring
