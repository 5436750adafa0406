// The fused LARS update as a CPU kernel: lock the variable and its velocity, make their buffers
// private (copy-on-write, as TF's own training ops do), then run the core's blocks on TF's intra-op
// threads: squared norms per block, combined in block order (the same result on every rank and
// every run, whatever the threads), then the update. The arithmetic lives in core/lars.cc.
#define EIGEN_USE_THREADS

#include <algorithm>
#include <vector>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/kernels/training_op_helpers.h"
#include "tensorflow/core/platform/errors.h"
#include "../core/lars.h"

namespace tfring {
namespace {

using CPUDevice = Eigen::ThreadPoolDevice;
using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::Var;

// Storage type of the core for each TF type, and the velocity type.
template <typename T> struct Core;
template <> struct Core<float> { using Elem = float; using Velocity = float; };
template <> struct Core<double> { using Elem = double; using Velocity = double; };
template <> struct Core<Eigen::half> { using Elem = Half; using Velocity = float; };

template <typename T>
class LarsUpdateOp : public OpKernel {
 public:
  explicit LarsUpdateOp(OpKernelConstruction* c) : OpKernel(c) {
    float momentum, decay, trust, epsilon;
    OP_REQUIRES_OK(c, c->GetAttr("momentum", &momentum));
    OP_REQUIRES_OK(c, c->GetAttr("weight_decay", &decay));
    OP_REQUIRES_OK(c, c->GetAttr("trust_coefficient", &trust));
    OP_REQUIRES_OK(c, c->GetAttr("epsilon", &epsilon));
    OP_REQUIRES_OK(c, c->GetAttr("adapt", &params_.adapt));
    OP_REQUIRES_OK(c, c->GetAttr("nesterov", &params_.nesterov));
    OP_REQUIRES(c, momentum >= 0 && decay >= 0 && trust > 0 && epsilon >= 0,
                tensorflow::errors::InvalidArgument(
                    "TfringLarsUpdate: momentum, weight_decay and epsilon must be >= 0 and "
                    "trust_coefficient > 0"));
    params_.momentum = momentum;
    params_.weightDecay = decay;
    params_.trustCoefficient = trust;
    params_.epsilon = epsilon;
  }

  void Compute(OpKernelContext* ctx) override {
    using Elem = typename Core<T>::Elem;
    using Velocity = typename Core<T>::Velocity;
    tensorflow::core::RefCountPtr<Var> var, velocity;
    OP_REQUIRES_OK(ctx, tensorflow::LookupResource(ctx, tensorflow::HandleFromInput(ctx, 0), &var));
    OP_REQUIRES_OK(ctx, tensorflow::LookupResource(ctx, tensorflow::HandleFromInput(ctx, 1), &velocity));
    OP_REQUIRES(ctx, var.get() != velocity.get(),
                tensorflow::errors::InvalidArgument("TfringLarsUpdate: var and velocity are the same variable"));
    const Tensor& grad = ctx->input(2);
    const Tensor& lr = ctx->input(3);
    OP_REQUIRES(ctx, tensorflow::TensorShapeUtils::IsScalar(lr.shape()),
                tensorflow::errors::InvalidArgument("TfringLarsUpdate: lr must be a scalar, got shape ",
                                                    lr.shape().DebugString()));

    // Both mutexes, in address order (as MaybeLockVariableInputMutexesInOrder does).
    tensorflow::mutex* first = var->mu();
    tensorflow::mutex* second = velocity->mu();
    if (second < first) std::swap(first, second);
    tensorflow::mutex_lock lock1(*first);
    tensorflow::mutex_lock lock2(*second);

    Tensor* w = var->tensor();
    Tensor* v = velocity->tensor();
    OP_REQUIRES(ctx, w->IsInitialized() && v->IsInitialized(),
                tensorflow::errors::FailedPrecondition("TfringLarsUpdate: uninitialized variable"));
    OP_REQUIRES(ctx, w->dtype() == tensorflow::DataTypeToEnum<T>::v() &&
                         v->dtype() == tensorflow::DataTypeToEnum<Velocity>::v(),
                tensorflow::errors::InvalidArgument(
                    "TfringLarsUpdate: var must be ", tensorflow::DataTypeString(tensorflow::DataTypeToEnum<T>::v()),
                    " and velocity ", tensorflow::DataTypeString(tensorflow::DataTypeToEnum<Velocity>::v()),
                    ", got ", tensorflow::DataTypeString(w->dtype()), " and ",
                    tensorflow::DataTypeString(v->dtype())));
    OP_REQUIRES(ctx, w->shape() == grad.shape() && v->shape() == grad.shape(),
                tensorflow::errors::InvalidArgument(
                    "TfringLarsUpdate: var ", w->shape().DebugString(), ", velocity ", v->shape().DebugString(),
                    " and grad ", grad.shape().DebugString(), " must have one shape"));
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
    if (params_.adapt && n > 0) {
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
    const double ratio = larsTrustRatio(params_, weightSq, gradSq);
    const double localLr = static_cast<double>(lr.scalar<float>()()) * ratio;
    pool->ParallelFor(static_cast<int64_t>(blocks), costPerBlock, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        auto [start, len] = blockRange(b);
        larsApply(wp + start, vp + start, gp + start, len, localLr, params_);
      }
    });

    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, tensorflow::TensorShape({}), &out));
    out->scalar<float>()() = static_cast<float>(ratio);
  }

 private:
  LarsParams params_;
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
