// The fused LARS update on the GPU: one kernel sums w² and g² per block (fixed blocks, a fixed
// in-block tree, so the norms do not depend on scheduling), a second combines the partial sums
// (every block the same way), computes the trust ratio and updates w and v in place. The formula
// and the float32 arithmetic of the update are those of core/lars.h.
#include "cuda_kernels.h"
#include "device_math.cuh"

namespace tfring {
namespace cuda {
namespace {

constexpr int kNormBlocks = 1024;  // at most; fewer for small tensors

__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ float widen(Half x) { return halfBitsToFloat(x.bits); }
__device__ __forceinline__ void store(float* p, float x) { *p = x; }
__device__ __forceinline__ void store(Half* p, float x) { p->bits = floatToHalfBits(x); }

// Sums `value` over the block in a fixed tree order; the result is valid in thread 0.
__device__ double blockSum(double value, double* shared) {
  shared[threadIdx.x] = value;
  __syncthreads();
  for (int width = blockDim.x / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) shared[threadIdx.x] += shared[threadIdx.x + width];
    __syncthreads();
  }
  double total = shared[0];
  __syncthreads();
  return total;
}

template <typename T>
__global__ void squaredNorms(const T* w, const T* g, size_t n, double* partial) {
  __shared__ double shared[kThreads];
  double ws = 0, gs = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    double a = widen(w[i]), b = widen(g[i]);
    ws += a * a;
    gs += b * b;
  }
  ws = blockSum(ws, shared);
  gs = blockSum(gs, shared);
  if (threadIdx.x == 0) {
    partial[2 * blockIdx.x] = ws;
    partial[2 * blockIdx.x + 1] = gs;
  }
}

template <typename T>
__global__ void larsApply(T* w, float* v, const T* g, size_t n, float lr, LarsParams p, const double* partial,
                          int normBlocks, float* ratioOut) {
  __shared__ double shared[kThreads];
  __shared__ double localLr;
  double ws = 0, gs = 0;
  if (p.adapt) {
    for (int b = threadIdx.x; b < normBlocks; b += blockDim.x) {
      ws += partial[2 * b];
      gs += partial[2 * b + 1];
    }
    ws = blockSum(ws, shared);
    gs = blockSum(gs, shared);
  }
  if (threadIdx.x == 0) {
    double ratio = 1.0;
    if (p.adapt && ws > 0 && gs > 0) {
      double wn = sqrt(ws), gn = sqrt(gs);
      ratio = p.trustCoefficient * wn / (gn + p.weightDecay * wn + p.epsilon);
    }
    localLr = static_cast<double>(lr) * ratio;
    if (blockIdx.x == 0 && ratioOut != nullptr) *ratioOut = static_cast<float>(ratio);
  }
  __syncthreads();
  const float rate = static_cast<float>(localLr);
  const float m = static_cast<float>(p.momentum);
  const float decay = static_cast<float>(p.weightDecay);
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    float wi = widen(w[i]);
    float step = rate * (widen(g[i]) + decay * wi);
    float vi = m * v[i] + step;
    v[i] = vi;
    store(&w[i], p.nesterov ? wi - (m * vi + step) : wi - vi);
  }
}

int normBlocksFor(size_t n) {
  size_t blocks = (n + kThreads * 4 - 1) / (kThreads * 4);
  return static_cast<int>(blocks < 1 ? 1 : (blocks > kNormBlocks ? kNormBlocks : blocks));
}

template <typename T>
cudaError_t launch(T* w, float* v, const T* g, size_t n, float lr, const LarsParams& p, void* scratch, float* ratio,
                   cudaStream_t stream) {
  double* partial = static_cast<double*>(scratch);
  const int normBlocks = normBlocksFor(n);
  if (p.adapt) {
    squaredNorms<T><<<normBlocks, kThreads, 0, stream>>>(w, g, n, partial);
    cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) return status;
  }
  larsApply<T><<<gridFor(n), kThreads, 0, stream>>>(w, v, g, n, lr, p, partial, normBlocks, ratio);
  return cudaGetLastError();
}

}  // namespace

size_t larsScratchBytes(size_t n) { return sizeof(double) * 2 * static_cast<size_t>(normBlocksFor(n)); }

cudaError_t larsUpdate(float* w, float* v, const float* g, size_t n, float lr, const LarsParams& p, void* scratch,
                       float* ratio, cudaStream_t stream) {
  return launch(w, v, g, n, lr, p, scratch, ratio, stream);
}

cudaError_t larsUpdate(Half* w, float* v, const Half* g, size_t n, float lr, const LarsParams& p, void* scratch,
                       float* ratio, cudaStream_t stream) {
  return launch(w, v, g, n, lr, p, scratch, ratio, stream);
}

}  // namespace cuda
}  // namespace tfring
