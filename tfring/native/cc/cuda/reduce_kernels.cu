// Elementwise reduction of two buffers (ring steps) and the division of MEAN.
#include <type_traits>

#include "cuda_kernels.h"
#include "device_math.cuh"

namespace tfring {
namespace cuda {
namespace {

struct Sum {
  template <typename T> __device__ T operator()(T a, T b) const { return a + b; }
};
struct Prod {
  template <typename T> __device__ T operator()(T a, T b) const { return a * b; }
};
// NaN on either side gives NaN (NumPy's minimum/maximum), as in core/reduce.cc.
struct Min {
  template <typename T> __device__ T operator()(T a, T b) const { return (a != a || a < b) ? a : b; }
};
struct Max {
  template <typename T> __device__ T operator()(T a, T b) const { return (a != a || a > b) ? a : b; }
};

// Storage <-> arithmetic for each element type: 16-bit floats compute in float32.
template <typename T> struct Elem {
  using Compute = T;
  __device__ static Compute load(T x) { return x; }
  __device__ static T store(Compute x) { return x; }
};
struct HalfBits { uint16_t bits; };
struct Bf16Bits { uint16_t bits; };
template <> struct Elem<HalfBits> {
  using Compute = float;
  __device__ static float load(HalfBits x) { return halfBitsToFloat(x.bits); }
  __device__ static HalfBits store(float x) { return {floatToHalfBits(x)}; }
};
template <> struct Elem<Bf16Bits> {
  using Compute = float;
  __device__ static float load(Bf16Bits x) { return bf16BitsToFloat(x.bits); }
  __device__ static Bf16Bits store(float x) { return {floatToBf16Bits(x)}; }
};

// Scalar path: any alignment.
template <typename T, typename Op>
__global__ void reduceScalar(T* dst, const T* a, const T* b, size_t n, Op op) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    dst[i] = Elem<T>::store(op(Elem<T>::load(a[i]), Elem<T>::load(b[i])));
  }
}

// Vector path: 16-byte loads and stores when all three buffers are 16-byte aligned.
template <typename T, typename Op>
__global__ void reduceVector(T* dst, const T* a, const T* b, size_t n, Op op) {
  constexpr int kPer = 16 / sizeof(T);
  struct alignas(16) Pack { T v[kPer]; };
  const size_t packs = n / kPer;
  const Pack* pa = reinterpret_cast<const Pack*>(a);
  const Pack* pb = reinterpret_cast<const Pack*>(b);
  Pack* pd = reinterpret_cast<Pack*>(dst);
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < packs; i += stride) {
    Pack x = pa[i], y = pb[i], out;
#pragma unroll
    for (int k = 0; k < kPer; ++k) out.v[k] = Elem<T>::store(op(Elem<T>::load(x.v[k]), Elem<T>::load(y.v[k])));
    pd[i] = out;
  }
  for (size_t i = packs * kPer + blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += stride) {
    dst[i] = Elem<T>::store(op(Elem<T>::load(a[i]), Elem<T>::load(b[i])));
  }
}

template <typename T, typename Op>
cudaError_t launchReduce(void* dst, const void* a, const void* b, size_t n, Op op, cudaStream_t stream) {
  T* d = static_cast<T*>(dst);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  if (aligned16(dst) && aligned16(a) && aligned16(b)) {
    reduceVector<T, Op><<<gridFor(n / (16 / sizeof(T)) + 1), kThreads, 0, stream>>>(d, x, y, n, op);
  } else {
    reduceScalar<T, Op><<<gridFor(n), kThreads, 0, stream>>>(d, x, y, n, op);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t reduceTyped(void* dst, const void* a, const void* b, size_t n, ReduceOp op, cudaStream_t stream) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMean: return launchReduce<T>(dst, a, b, n, Sum(), stream);
    case ReduceOp::kProduct: return launchReduce<T>(dst, a, b, n, Prod(), stream);
    case ReduceOp::kMin: return launchReduce<T>(dst, a, b, n, Min(), stream);
    case ReduceOp::kMax: return launchReduce<T>(dst, a, b, n, Max(), stream);
  }
  return cudaErrorInvalidValue;
}

template <typename T>
__global__ void divideKernel(T* data, size_t n, int divisor) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    if constexpr (std::is_integral<T>::value) {
      data[i] = static_cast<T>(static_cast<long long>(data[i]) / divisor);  // truncating, as on the CPU
    } else {
      // A true division (not a multiply by 1/divisor), so a mean equals sum / n bit for bit.
      using C = typename Elem<T>::Compute;
      data[i] = Elem<T>::store(Elem<T>::load(data[i]) / static_cast<C>(divisor));
    }
  }
}

template <typename T>
cudaError_t launchDivide(void* data, size_t n, int divisor, cudaStream_t stream) {
  divideKernel<T><<<gridFor(n), kThreads, 0, stream>>>(static_cast<T*>(data), n, divisor);
  return cudaGetLastError();
}

}  // namespace

cudaError_t reduceInto(void* dst, const void* a, const void* b, size_t count, DataType type, ReduceOp op,
                       cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  switch (type) {
    case DataType::kFloat16: return reduceTyped<HalfBits>(dst, a, b, count, op, stream);
    case DataType::kBFloat16: return reduceTyped<Bf16Bits>(dst, a, b, count, op, stream);
    case DataType::kFloat32: return reduceTyped<float>(dst, a, b, count, op, stream);
    case DataType::kFloat64: return reduceTyped<double>(dst, a, b, count, op, stream);
    case DataType::kInt32: return reduceTyped<int32_t>(dst, a, b, count, op, stream);
    case DataType::kInt64: return reduceTyped<int64_t>(dst, a, b, count, op, stream);
    case DataType::kUint8: return reduceTyped<uint8_t>(dst, a, b, count, op, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t divideBy(void* data, size_t count, DataType type, int divisor, cudaStream_t stream) {
  if (divisor == 1 || count == 0) return cudaSuccess;
  if (divisor == 0) return cudaErrorInvalidValue;
  switch (type) {
    case DataType::kFloat16: return launchDivide<HalfBits>(data, count, divisor, stream);
    case DataType::kBFloat16: return launchDivide<Bf16Bits>(data, count, divisor, stream);
    case DataType::kFloat32: return launchDivide<float>(data, count, divisor, stream);
    case DataType::kFloat64: return launchDivide<double>(data, count, divisor, stream);
    case DataType::kInt32: return launchDivide<int32_t>(data, count, divisor, stream);
    case DataType::kInt64: return launchDivide<int64_t>(data, count, divisor, stream);
    case DataType::kUint8: return launchDivide<uint8_t>(data, count, divisor, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace cuda
}  // namespace tfring
