// Elementwise reduction of two buffers (ring steps), and the last step of a MEAN with its division.
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
// The last addition of a MEAN and its division, as core/reduce.cc's Mean: T is float for the
// 16-bit floats (rounded once, on the store); other types keep the bits of sum-then-divide.
struct Mean {
  int divisor;
  template <typename T> __device__ T operator()(T a, T b) const {
    return static_cast<T>(static_cast<T>(a + b) / static_cast<T>(divisor));
  }
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

template <typename Op>
cudaError_t launchForType(void* dst, const void* a, const void* b, size_t n, DataType type, Op op,
                          cudaStream_t stream) {
  switch (type) {
    case DataType::kFloat16: return launchReduce<HalfBits>(dst, a, b, n, op, stream);
    case DataType::kBFloat16: return launchReduce<Bf16Bits>(dst, a, b, n, op, stream);
    case DataType::kFloat32: return launchReduce<float>(dst, a, b, n, op, stream);
    case DataType::kFloat64: return launchReduce<double>(dst, a, b, n, op, stream);
    case DataType::kInt32: return launchReduce<int32_t>(dst, a, b, n, op, stream);
    case DataType::kInt64: return launchReduce<int64_t>(dst, a, b, n, op, stream);
    case DataType::kUint8: return launchReduce<uint8_t>(dst, a, b, n, op, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t reduceInto(void* dst, const void* a, const void* b, size_t count, DataType type, ReduceOp op,
                       cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMean: return launchForType(dst, a, b, count, type, Sum(), stream);
    case ReduceOp::kProduct: return launchForType(dst, a, b, count, type, Prod(), stream);
    case ReduceOp::kMin: return launchForType(dst, a, b, count, type, Min(), stream);
    case ReduceOp::kMax: return launchForType(dst, a, b, count, type, Max(), stream);
    case ReduceOp::kAdasum: break;  // not elementwise: the host engine's alone
  }
  return cudaErrorInvalidValue;
}

cudaError_t reduceMeanInto(void* dst, const void* a, const void* b, size_t count, DataType type, int divisor,
                           cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (divisor < 1) return cudaErrorInvalidValue;
  if (divisor == 1) return launchForType(dst, a, b, count, type, Sum(), stream);
  return launchForType(dst, a, b, count, type, Mean{divisor}, stream);
}

}  // namespace cuda
}  // namespace tfring
