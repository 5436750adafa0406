// TfringRelay: a synchronous op that passes its inputs through, placed after an asynchronous
// collective whose list has several outputs.
//
// Why it exists: when an asynchronous kernel calls done(), TensorFlow's executor schedules every
// node that became ready as a task of its own on the inter-op pool (ExecutorState::ScheduleReady
// with no inline queue), one thread-pool push and often a thread wake-up each. A list of 1000
// gradients whose results feed 1000 consumers paid that 1000 times per step, on the engine's
// thread. After a synchronous op, the inexpensive consumers run inline on its thread, so the
// collective's done() makes one task, the relay.
#include "tensorflow/core/framework/op_kernel.h"

namespace tfring {
namespace {

class RelayOp : public tensorflow::OpKernel {
 public:
  explicit RelayOp(tensorflow::OpKernelConstruction* c) : OpKernel(c) {}
  void Compute(tensorflow::OpKernelContext* ctx) override {
    for (int i = 0; i < ctx->num_inputs(); ++i) ctx->set_output(i, ctx->input(i));
  }
  bool IsExpensive() override { return false; }
};

// The pass-through needs no device code: it hands the same buffers on, wherever they live. Int32
// tensors stay on the host (TensorFlow's convention for int32 on GPUs), so the GPU kernel skips them.
REGISTER_KERNEL_BUILDER(Name("TfringRelay").Device(tensorflow::DEVICE_CPU), RelayOp);
REGISTER_KERNEL_BUILDER(Name("TfringRelay")
                            .Device(tensorflow::DEVICE_GPU)
                            .TypeConstraint("T", {tensorflow::DT_HALF, tensorflow::DT_BFLOAT16, tensorflow::DT_FLOAT,
                                                  tensorflow::DT_DOUBLE, tensorflow::DT_INT64, tensorflow::DT_UINT8,
                                                  tensorflow::DT_BOOL}),
                        RelayOp);

}  // namespace
}  // namespace tfring
