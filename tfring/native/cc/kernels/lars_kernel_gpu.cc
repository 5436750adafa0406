// The fused LARS update as a GPU kernel (float32 and float16 variables; float64 ones use the
// composed update): make the buffers private (copy-on-write, a device-to-device copy on TF's
// stream), then cuda::larsUpdate on TF's stream: block norms reduced in a fixed order, the ratio
// and the update, with the ratio written straight to the op's output. Built only where nvcc and a
// GPU build of TensorFlow are present (GOOGLE_CUDA).
#if GOOGLE_CUDA

#include <cuda_runtime.h>

#include "../cuda/cuda_kernels.h"
#include "lars_kernel.h"
#include "xla/stream_executor/stream.h"

namespace tfring {
namespace {

using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::Var;

// What PrepareToUpdateVariable does, with the copy made on `stream`: a variable whose buffer is
// shared (a value read before, or copy-on-read mode) gets a private copy before it is updated.
absl::Status makePrivate(OpKernelContext* ctx, Var* var, cudaStream_t stream) {
  Tensor* t = var->tensor();
  if (!var->copy_on_read_mode.load() && t->RefCountIsOne()) return absl::OkStatus();
  Tensor copy;
  tensorflow::AllocatorAttributes attr;
  attr.set_gpu_compatible(true);
  attr.set_nic_compatible(true);
  TF_RETURN_IF_ERROR(ctx->allocate_temp(t->dtype(), t->shape(), &copy, attr));
  cudaError_t status = cudaMemcpyAsync(const_cast<char*>(copy.tensor_data().data()), t->tensor_data().data(),
                                       t->TotalBytes(), cudaMemcpyDeviceToDevice, stream);
  if (status != cudaSuccess) {
    return tensorflow::errors::Internal("TfringLarsUpdate: copying the variable: ", cudaGetErrorString(status));
  }
  *t = copy;
  return absl::OkStatus();
}

template <typename T>
class GpuLarsUpdateOp : public LarsUpdateBase<T> {
 public:
  using typename LarsUpdateBase<T>::Elem;
  using typename LarsUpdateBase<T>::Velocity;
  explicit GpuLarsUpdateOp(OpKernelConstruction* c) : LarsUpdateBase<T>(c) {}

 protected:
  void update(OpKernelContext* ctx, Var* var, Var* velocity, const Tensor& grad, float lr) override {
    auto* stream = ctx->op_device_context() ? ctx->op_device_context()->stream() : nullptr;
    OP_REQUIRES(ctx, stream != nullptr, tensorflow::errors::Internal("TfringLarsUpdate: no GPU stream"));
    auto s = static_cast<cudaStream_t>(stream->platform_specific_handle().stream);
    OP_REQUIRES_OK(ctx, makePrivate(ctx, var, s));
    OP_REQUIRES_OK(ctx, makePrivate(ctx, velocity, s));
    const size_t n = static_cast<size_t>(grad.NumElements());
    Tensor scratch;
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_UINT8,
                                           tensorflow::TensorShape({static_cast<int64_t>(cuda::larsScratchBytes(n))}),
                                           &scratch));
    Tensor* ratio = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, tensorflow::TensorShape({}), &ratio));
    auto* w = reinterpret_cast<Elem*>(var->tensor()->flat<T>().data());
    auto* v = velocity->tensor()->flat<Velocity>().data();
    auto* g = reinterpret_cast<const Elem*>(grad.flat<T>().data());
    cudaError_t status = cuda::larsUpdate(w, v, g, n, lr, this->params_, const_cast<char*>(scratch.tensor_data().data()),
                                          ratio->flat<float>().data(), s);
    OP_REQUIRES(ctx, status == cudaSuccess,
                tensorflow::errors::Internal("TfringLarsUpdate: CUDA launch failed: ", cudaGetErrorString(status)));
  }
};

#define REGISTER_LARS_GPU(T)                                                                               \
  REGISTER_KERNEL_BUILDER(                                                                                 \
      Name("TfringLarsUpdate").Device(tensorflow::DEVICE_GPU).TypeConstraint<T>("T").HostMemory("lr"), \
      GpuLarsUpdateOp<T>)
REGISTER_LARS_GPU(float);
REGISTER_LARS_GPU(Eigen::half);
#undef REGISTER_LARS_GPU

}  // namespace
}  // namespace tfring

#endif  // GOOGLE_CUDA
