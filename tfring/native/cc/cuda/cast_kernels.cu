// float32 <-> float16 / bfloat16 casts for gradient compression (round to nearest even).
#include "cuda_kernels.h"
#include "device_math.cuh"

namespace tfring {
namespace cuda {
namespace {

enum class Cast { kToHalf, kToBf16, kFromHalf, kFromBf16 };

template <Cast kind>
__global__ void castKernel(void* dst, const void* src, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    if constexpr (kind == Cast::kToHalf) {
      static_cast<uint16_t*>(dst)[i] = floatToHalfBits(static_cast<const float*>(src)[i]);
    } else if constexpr (kind == Cast::kToBf16) {
      static_cast<uint16_t*>(dst)[i] = floatToBf16Bits(static_cast<const float*>(src)[i]);
    } else if constexpr (kind == Cast::kFromHalf) {
      static_cast<float*>(dst)[i] = halfBitsToFloat(static_cast<const uint16_t*>(src)[i]);
    } else {
      static_cast<float*>(dst)[i] = bf16BitsToFloat(static_cast<const uint16_t*>(src)[i]);
    }
  }
}

template <Cast kind>
cudaError_t launch(void* dst, const void* src, size_t n, cudaStream_t stream) {
  castKernel<kind><<<gridFor(n), kThreads, 0, stream>>>(dst, src, n);
  return cudaGetLastError();
}

}  // namespace

cudaError_t castFloat(void* dst, DataType dstType, const void* src, DataType srcType, size_t count,
                      cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (srcType == DataType::kFloat32 && dstType == DataType::kFloat16) return launch<Cast::kToHalf>(dst, src, count, stream);
  if (srcType == DataType::kFloat32 && dstType == DataType::kBFloat16) return launch<Cast::kToBf16>(dst, src, count, stream);
  if (srcType == DataType::kFloat16 && dstType == DataType::kFloat32) return launch<Cast::kFromHalf>(dst, src, count, stream);
  if (srcType == DataType::kBFloat16 && dstType == DataType::kFloat32) return launch<Cast::kFromBf16>(dst, src, count, stream);
  return cudaErrorInvalidValue;
}

}  // namespace cuda
}  // namespace tfring
