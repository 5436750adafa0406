// What the CPU and GPU collective kernels share: status and dtype translation, the runtime check,
// and ListCollectiveOp (allreduce / broadcast of a list), whose GPU flavour only changes how the
// engine reaches the data (collective_kernels_gpu.cc).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace tfring {

absl::Status toTf(const Status& s);
// The core's op for an op's `reduce_op` attr ("sum", "mean", "min", "max", "product").
ReduceOp parseReduceOp(const std::string& s);
// The core's type for a TF dtype; false for types the op attrs already exclude.
bool coreType(tensorflow::DataType t, DataType* out);
std::vector<int64_t> dims(const tensorflow::TensorShape& s);
// The runtime, or null after setting an error on ctx that says to call init.
std::shared_ptr<Runtime> runtimeOrFail(tensorflow::OpKernelContext* ctx);
// The engine of process set `processSet` (attr process_set; 0 is the whole job), or null after
// setting InvalidArgument on ctx: no such set, or this rank is not in it.
std::shared_ptr<Engine> engineOrFail(tensorflow::OpKernelContext* ctx, Runtime& rt, int processSet);
// Allocates outputs 0..count-1 like inputs 0..count-1 (output_blocks.h) and describes both in `req`.
absl::Status describeList(tensorflow::OpKernelContext* ctx, int count, Request* req);
std::function<void(const Status&)> finisher(tensorflow::OpKernelContext* ctx,
                                            tensorflow::AsyncOpKernel::DoneCallback done);

// Allreduce and broadcast: N inputs to N outputs of the same shapes.
class ListCollectiveOp : public tensorflow::AsyncOpKernel {
 public:
  ListCollectiveOp(tensorflow::OpKernelConstruction* c, OpKind kind);
  void ComputeAsync(tensorflow::OpKernelContext* ctx, DoneCallback done) override;

 protected:
  // Last look at the request before it is enqueued: the GPU kernels stage device tensors here.
  // Returns false after setting an error on ctx.
  virtual bool prepare(tensorflow::OpKernelContext* ctx, const Runtime& runtime, Request* request) { return true; }

 private:
  OpKind kind_;
  ReduceOp op_ = ReduceOp::kSum;
  int root_ = 0;
  int set_ = 0;
};

}  // namespace tfring
