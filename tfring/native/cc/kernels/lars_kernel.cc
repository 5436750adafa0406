// The fused LARS update as a CPU kernel: make the variable's and the velocity's buffers private
// (copy-on-write, as TF's own training ops do), then run the core's blocks on TF's intra-op
// threads: squared norms per block, combined in block order (the same result on every rank and
// every run, whatever the threads), then the update. The arithmetic lives in core/lars.cc; the
// attributes and input checks in lars_kernel.h.
#define EIGEN_USE_THREADS

#include "lars_kernel.h"

#include <vector>

#include "tensorflow/core/kernels/training_op_helpers.h"

namespace tfring {
namespace {

using CPUDevice = Eigen::ThreadPoolDevice;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::Var;

template <typename T>
class LarsUpdateOp : public LarsUpdateBase<T> {
 public:
  using typename LarsUpdateBase<T>::Elem;
  using typename LarsUpdateBase<T>::Velocity;
  explicit LarsUpdateOp(OpKernelConstruction* c) : LarsUpdateBase<T>(c) {}

 protected:
  void update(OpKernelContext* ctx, Var* var, Var* velocity, const Tensor& grad, float lr) override {
    const LarsParams& params = this->params_;
    Tensor* w = var->tensor();
    Tensor* v = velocity->tensor();
    OP_REQUIRES_OK(ctx, tensorflow::PrepareToUpdateVariable<CPUDevice, T>(ctx, w, var->copy_on_read_mode.load()));
    OP_REQUIRES_OK(ctx, tensorflow::PrepareToUpdateVariable<CPUDevice, Velocity>(
                            ctx, v, velocity->copy_on_read_mode.load()));

    Elem* wp = reinterpret_cast<Elem*>(w->flat<T>().data());
    Velocity* vp = v->flat<Velocity>().data();
    const Elem* gp = reinterpret_cast<const Elem*>(grad.flat<T>().data());
    const size_t n = static_cast<size_t>(grad.NumElements());
    const size_t blocks = (n + kLarsBlock - 1) / kLarsBlock;
    auto* pool = ctx->device()->tensorflow_cpu_worker_threads()->workers;
    auto blockRange = [n](int64_t b) {
      size_t start = static_cast<size_t>(b) * kLarsBlock;
      return std::make_pair(start, std::min(n, start + kLarsBlock) - start);
    };
    const int64_t costPerBlock = static_cast<int64_t>(kLarsBlock) * 8;

    double weightSq = 0, gradSq = 0;
    if (params.adapt && n > 0) {
      std::vector<double> partial(2 * blocks, 0.0);
      pool->ParallelFor(static_cast<int64_t>(blocks), costPerBlock, [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
          auto [start, len] = blockRange(b);
          partial[2 * b] = sumOfSquares(wp + start, len);
          partial[2 * b + 1] = sumOfSquares(gp + start, len);
        }
      });
      for (size_t b = 0; b < blocks; ++b) {
        weightSq += partial[2 * b];
        gradSq += partial[2 * b + 1];
      }
    }
    const double ratio = larsTrustRatio(params, weightSq, gradSq);
    const double localLr = static_cast<double>(lr) * ratio;
    pool->ParallelFor(static_cast<int64_t>(blocks), costPerBlock, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        auto [start, len] = blockRange(b);
        larsApply(wp + start, vp + start, gp + start, len, localLr, params);
      }
    });

    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, tensorflow::TensorShape({}), &out));
    out->scalar<float>()() = static_cast<float>(ratio);
  }
};

#define REGISTER_LARS(T) \
  REGISTER_KERNEL_BUILDER(   \
      Name("TfringLarsUpdate").Device(tensorflow::DEVICE_CPU).TypeConstraint<T>("T").HostMemory("lr"), LarsUpdateOp<T>)
REGISTER_LARS(float);
REGISTER_LARS(double);
REGISTER_LARS(Eigen::half);
#undef REGISTER_LARS

}  // namespace
}  // namespace tfring
