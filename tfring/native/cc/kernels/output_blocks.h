// The outputs of a list collective: a big tensor's own (its input's buffer when TF allows), and
// small tensors' carved out of a few shared blocks.
//
// A list of 1000 gradients of 1 KiB each cost 1000 allocator calls per step (about a third of the
// op's time on the CPU); carved from blocks it costs one per block. Each piece starts on the
// allocator's alignment, as a tensor of its own would. A block lives while any piece of it does,
// so an output kept after the step holds at most kBlockBytes.
#pragma once

#include <cstddef>
#include <vector>

#include "tensorflow/core/framework/op_kernel.h"

namespace tfring {

// A tensor of at least this many bytes gets its own output (its input's buffer when TF allows).
constexpr size_t kOwnOutputFrom = 64 << 10;
// The most a block carries: smaller tensors are carved from blocks of up to this size.
constexpr size_t kBlockBytes = 1 << 20;

// Allocates outputs 0..count-1 shaped like inputs 0..count-1 and returns them in input order.
// `carve`: cut small outputs from shared blocks (host memory); otherwise each gets its own.
absl::Status allocateListOutputs(tensorflow::OpKernelContext* ctx, int count, bool carve,
                                 std::vector<tensorflow::Tensor*>* outputs);

}  // namespace tfring
