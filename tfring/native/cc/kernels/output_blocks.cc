#include "output_blocks.h"

#include "tensorflow/core/framework/allocator.h"

namespace tfring {

using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;

namespace {

size_t aligned(size_t bytes) {
  constexpr size_t a = tensorflow::Allocator::kAllocatorAlignment;
  return (bytes + a - 1) / a * a;
}

// Outputs `small[begin, end)` carved from one block.
absl::Status carveBlock(OpKernelContext* ctx, const std::vector<int>& small, size_t begin, size_t end,
                        size_t blockBytes, std::vector<Tensor*>* outputs) {
  Tensor block;
  TF_RETURN_IF_ERROR(ctx->allocate_temp(tensorflow::DT_UINT8, TensorShape({static_cast<int64_t>(blockBytes)}),
                                        &block));
  int64_t offset = 0;
  for (size_t k = begin; k < end; ++k) {
    const int i = small[k];
    const Tensor& in = ctx->input(i);
    const auto bytes = static_cast<int64_t>(in.TotalBytes());
    Tensor piece;
    TF_RETURN_IF_ERROR(piece.BitcastFrom(block.Slice(offset, offset + bytes), in.dtype(), in.shape()));
    ctx->set_output(i, piece);
    (*outputs)[i] = ctx->mutable_output(i);
    offset += static_cast<int64_t>(aligned(bytes));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status allocateListOutputs(OpKernelContext* ctx, int count, bool carve, std::vector<Tensor*>* outputs) {
  outputs->assign(count, nullptr);
  std::vector<int> small;
  for (int i = 0; i < count; ++i) {
    const Tensor& in = ctx->input(i);
    if (in.TotalBytes() >= kOwnOutputFrom) {
      // Reusing a big input's buffer saves memory; for small ones asking TF costs more than it saves.
      TF_RETURN_IF_ERROR(ctx->forward_input_or_allocate_output({i}, i, in.shape(), &(*outputs)[i]));
    } else if (carve) {
      small.push_back(i);
    } else {
      TF_RETURN_IF_ERROR(ctx->allocate_output(i, in.shape(), &(*outputs)[i]));
    }
  }
  for (size_t begin = 0; begin < small.size();) {
    size_t end = begin, bytes = 0;
    while (end < small.size()) {
      const size_t next = aligned(ctx->input(small[end]).TotalBytes());
      if (end > begin && bytes + next > kBlockBytes) break;
      bytes += next;
      ++end;
    }
    TF_RETURN_IF_ERROR(carveBlock(ctx, small, begin, end, bytes, outputs));
    begin = end;
  }
  return absl::OkStatus();
}

}  // namespace tfring
