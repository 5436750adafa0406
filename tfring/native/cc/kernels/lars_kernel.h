// What the CPU and GPU LARS kernels share: the attributes, and the checks made on the inputs under
// both variables' locks. A device's kernel only supplies update(): make the buffers private
// (copy-on-write, as TF's own training ops do), then run the core's (or the CUDA) arithmetic.
#pragma once

#include <algorithm>

#include "algorithms/lars.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/platform/errors.h"

namespace tfring {

// Storage type of the core for each TF type, and the velocity type.
template <typename T> struct Core;
template <> struct Core<float> { using Elem = float; using Velocity = float; };
template <> struct Core<double> { using Elem = double; using Velocity = double; };
template <> struct Core<Eigen::half> { using Elem = Half; using Velocity = float; };

template <typename T>
class LarsUpdateBase : public tensorflow::OpKernel {
 public:
  using Elem = typename Core<T>::Elem;
  using Velocity = typename Core<T>::Velocity;

  explicit LarsUpdateBase(tensorflow::OpKernelConstruction* c) : OpKernel(c) {
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

  void Compute(tensorflow::OpKernelContext* ctx) override {
    using tensorflow::Tensor;
    using tensorflow::Var;
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
    update(ctx, var.get(), velocity.get(), grad, lr.scalar<float>()());
  }

 protected:
  // The update of var and velocity (locked, checked) in place; allocates output 0, the ratio.
  virtual void update(tensorflow::OpKernelContext* ctx, tensorflow::Var* var, tensorflow::Var* velocity,
                      const tensorflow::Tensor& grad, float lr) = 0;

  LarsParams params_;
};

}  // namespace tfring
