// GPU kernels of tfring's data path, framework-free (no TensorFlow include): the elementwise
// reduction of ring steps, the last step of MEAN with its division, the float32 <-> float16/bfloat16 casts of
// compression, packing many tensors into a fusion buffer (and back) in one launch, and the fused
// LARS update. Every call is asynchronous on `stream` and returns the launch status.
//
// Semantics match the CPU core bit for bit where the CPU defines them (core/reduce.h): 16-bit
// floats are widened to float32, reduced, and rounded back to nearest-even once per step; MEAN
// divides in its last addition (reduceMeanInto: a 16-bit mean rounded once; true division for
// floats, truncating for integers). The LARS update matches core/lars.h to a few ulps of its
// operands: the GPU fuses multiply-adds (one rounding) where the CPU rounds twice.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "algorithms/lars.h"
#include "data_type.h"

namespace tfring {
namespace cuda {

// dst[i] = a[i] (op) b[i] for i < count; dst may alias a or b. kMean reduces as kSum.
cudaError_t reduceInto(void* dst, const void* a, const void* b, size_t count, DataType type, ReduceOp op,
                       cudaStream_t stream);

// dst[i] = (a[i] + b[i]) / divisor, the last addition of a MEAN over `divisor` ranks, bit for bit
// as core/reduce.h's reduceMeanInto. Divisor 1: the sum. dst may alias a or b.
cudaError_t reduceMeanInto(void* dst, const void* a, const void* b, size_t count, DataType type, int divisor,
                           cudaStream_t stream);

// Casts between float32 and float16/bfloat16 (round to nearest even), for gradient compression.
cudaError_t castFloat(void* dst, DataType dstType, const void* src, DataType srcType, size_t count,
                      cudaStream_t stream);

// One tensor's place in a fusion buffer.
struct PackEntry {
  void* tensor;    // device pointer of the tensor
  size_t offset;   // byte offset in the fusion buffer
  size_t bytes;    // its size
};

// Copies every entry's tensor into `buffer` at its offset (pack) or back (unpack) in ONE launch.
// `entries` must be readable by the device (device memory, or pinned host memory that is mapped).
cudaError_t pack(void* buffer, const PackEntry* entries, int count, size_t maxBytes, cudaStream_t stream);
cudaError_t unpack(const void* buffer, const PackEntry* entries, int count, size_t maxBytes, cudaStream_t stream);

// Device scratch the LARS update needs for n elements (partial norms of each block).
size_t larsScratchBytes(size_t n);

// The fused LARS update of one variable in place: norms of w and g (reduced in a fixed order, so
// the result does not depend on scheduling), trust ratio, velocity and weights. `ratio` (device,
// one float) receives the trust ratio. T: float or Half (with a float32 velocity).
cudaError_t larsUpdate(float* w, float* v, const float* g, size_t n, float lr, const LarsParams& p, void* scratch,
                       float* ratio, cudaStream_t stream);
cudaError_t larsUpdate(Half* w, float* v, const Half* g, size_t n, float lr, const LarsParams& p, void* scratch,
                       float* ratio, cudaStream_t stream);

}  // namespace cuda
}  // namespace tfring
