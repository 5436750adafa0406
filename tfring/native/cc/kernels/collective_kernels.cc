// Thin AsyncOpKernels over the engine: validate, allocate (output_blocks.h), hand raw pointers
// to the engine, and return; the engine calls done() when the ring has finished. No algorithm
// lives here, and no TF inter-op thread ever blocks on a peer.
#include "collective_kernels.h"

#include <memory>

#include "output_blocks.h"
#include "tensorflow/core/platform/errors.h"

namespace tfring {

using tensorflow::AsyncOpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;

ReduceOp parseReduceOp(const std::string& s) {
  if (s == "mean") return ReduceOp::kMean;
  if (s == "min") return ReduceOp::kMin;
  if (s == "max") return ReduceOp::kMax;
  if (s == "product") return ReduceOp::kProduct;
  if (s == "adasum") return ReduceOp::kAdasum;
  return ReduceOp::kSum;
}

absl::Status toTf(const Status& s) {
  switch (s.code) {
    case Code::kOk: return absl::OkStatus();
    case Code::kInvalidArgument: return tensorflow::errors::InvalidArgument(s.message);
    case Code::kUnavailable: return tensorflow::errors::Unavailable(s.message);
    case Code::kDeadlineExceeded: return tensorflow::errors::DeadlineExceeded(s.message);
    case Code::kFailedPrecondition: return tensorflow::errors::FailedPrecondition(s.message);
    case Code::kInternal: break;
  }
  return tensorflow::errors::Internal(s.message);
}

bool coreType(tensorflow::DataType t, DataType* out) {
  switch (t) {
    case tensorflow::DT_HALF: *out = DataType::kFloat16; return true;
    case tensorflow::DT_BFLOAT16: *out = DataType::kBFloat16; return true;
    case tensorflow::DT_FLOAT: *out = DataType::kFloat32; return true;
    case tensorflow::DT_DOUBLE: *out = DataType::kFloat64; return true;
    case tensorflow::DT_INT32: *out = DataType::kInt32; return true;
    case tensorflow::DT_INT64: *out = DataType::kInt64; return true;
    case tensorflow::DT_UINT8:
    case tensorflow::DT_BOOL: *out = DataType::kUint8; return true;
    default: return false;
  }
}

std::vector<int64_t> dims(const TensorShape& s) {
  std::vector<int64_t> d;
  for (int i = 0; i < s.dims(); ++i) d.push_back(s.dim_size(i));
  return d;
}

std::shared_ptr<Runtime> runtimeOrFail(OpKernelContext* ctx) {
  auto rt = Runtime::current();
  if (!rt) {
    ctx->SetStatus(tensorflow::errors::FailedPrecondition(
        "tfring is not initialised in this process: call tfring.init() (or use tfring.RingStrategy) "
        "before running tfring ops"));
  }
  return rt;
}

std::shared_ptr<Engine> engineOrFail(OpKernelContext* ctx, Runtime& rt, int processSet) {
  try {
    return rt.processSets().engine(processSet);
  } catch (const Error& e) {
    ctx->SetStatus(toTf(Status::error(e.code(), std::string("tfring: ") + e.what())));
    return nullptr;
  }
}

std::function<void(const Status&)> finisher(OpKernelContext* ctx, AsyncOpKernel::DoneCallback done) {
  return [ctx, done](const Status& s) {
    if (!s.ok()) ctx->SetStatus(toTf(s));
    done();
  };
}

ListCollectiveOp::ListCollectiveOp(OpKernelConstruction* c, OpKind kind) : AsyncOpKernel(c), kind_(kind) {
  OP_REQUIRES_OK(c, c->GetAttr("process_set", &set_));
  if (kind == OpKind::kAllreduce) {
    std::string op;
    OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &op));
    op_ = parseReduceOp(op);
  } else {
    OP_REQUIRES_OK(c, c->GetAttr("root_rank", &root_));
  }
}

absl::Status describeList(OpKernelContext* ctx, int count, Request* req) {
  if (!coreType(ctx->input_dtype(0), &req->type)) return tensorflow::errors::InvalidArgument("tfring: unsupported dtype");
  // Device memory (GPU kernels) keeps one allocation per output: carving is tested on the host only.
  const bool onHost = ctx->device()->attributes().device_type() == tensorflow::DEVICE_CPU;
  std::vector<Tensor*> outputs;
  TF_RETURN_IF_ERROR(allocateListOutputs(ctx, count, onHost, &outputs));
  req->tensors.reserve(count);
  for (int i = 0; i < count; ++i) {
    const Tensor& in = ctx->input(i);
    req->tensors.push_back({in.tensor_data().data(), const_cast<char*>(outputs[i]->tensor_data().data()),
                            static_cast<size_t>(in.TotalBytes()), dims(in.shape())});
  }
  return absl::OkStatus();
}

void ListCollectiveOp::ComputeAsync(OpKernelContext* ctx, DoneCallback done) {
  auto rt = runtimeOrFail(ctx);
  if (!rt) return done();
  Request req;
  req.kind = kind_;
  req.name = name();
  req.op = op_;
  req.root = root_;
  auto engine = engineOrFail(ctx, *rt, set_);
  if (!engine) return done();
  if (kind_ == OpKind::kBroadcast && root_ >= engine->size()) {
    ctx->SetStatus(tensorflow::errors::InvalidArgument("tfring.broadcast: root_rank ", root_,
                                                       " is not a rank of this job (or process set) of size ",
                                                       engine->size()));
    return done();
  }
  OP_REQUIRES_OK_ASYNC(ctx, describeList(ctx, ctx->num_inputs(), &req), done);
  if (!prepare(ctx, *rt, &req)) return done();
  req.done = finisher(ctx, done);
  engine->enqueue(std::move(req));
}

namespace {

class AllreduceOp : public ListCollectiveOp {
 public:
  explicit AllreduceOp(OpKernelConstruction* c) : ListCollectiveOp(c, OpKind::kAllreduce) {}
};

class BroadcastOp : public ListCollectiveOp {
 public:
  explicit BroadcastOp(OpKernelConstruction* c) : ListCollectiveOp(c, OpKind::kBroadcast) {}
};

class AllgatherOp : public AsyncOpKernel {
 public:
  explicit AllgatherOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("process_set", &set_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    auto rt = runtimeOrFail(ctx);
    if (!rt) return done();
    auto engine = engineOrFail(ctx, *rt, set_);
    if (!engine) return done();
    const Tensor& in = ctx->input(0);
    OP_REQUIRES_ASYNC(ctx, in.dims() >= 1,
                      tensorflow::errors::InvalidArgument(
                          "tfring.allgather needs a tensor of rank >= 1 (it concatenates along the "
                          "first dimension), got a scalar"),
                      done);
    Request req;
    req.kind = OpKind::kAllgather;
    req.name = name();
    OP_REQUIRES_ASYNC(ctx, coreType(in.dtype(), &req.type),
                      tensorflow::errors::InvalidArgument("tfring: unsupported dtype"), done);
    req.tensors.push_back({in.tensor_data().data(), nullptr, static_cast<size_t>(in.TotalBytes()),
                           dims(in.shape())});
    TensorShape shape = in.shape();
    req.allocate = [ctx, shape](const std::vector<int64_t>& firstDims, std::string* error) mutable -> void* {
      int64_t rows = 0;
      for (int64_t d : firstDims) rows += d;
      shape.set_dim(0, rows);
      Tensor* out = nullptr;
      absl::Status s = ctx->allocate_output(0, shape, &out);
      if (!s.ok()) {
        *error = std::string(s.message());
        return nullptr;
      }
      return const_cast<char*>(out->tensor_data().data());
    };
    req.done = finisher(ctx, done);
    engine->enqueue(std::move(req));
  }

 private:
  int set_ = 0;
};

// A list in, each rank's share of its rows out (reducescatterRows), one fused collective.
class ReducescatterOp : public AsyncOpKernel {
 public:
  explicit ReducescatterOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    std::string op;
    OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &op));
    OP_REQUIRES_OK(c, c->GetAttr("process_set", &set_));
    op_ = parseReduceOp(op);
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    auto rt = runtimeOrFail(ctx);
    if (!rt) return done();
    auto engine = engineOrFail(ctx, *rt, set_);
    if (!engine) return done();
    Request req;
    req.kind = OpKind::kReducescatter;
    req.name = name();
    req.op = op_;
    OP_REQUIRES_ASYNC(ctx, coreType(ctx->input_dtype(0), &req.type),
                      tensorflow::errors::InvalidArgument("tfring: unsupported dtype"), done);
    const int size = engine->size(), rank = engine->rank();
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      const Tensor& in = ctx->input(i);
      OP_REQUIRES_ASYNC(ctx, in.dims() >= 1,
                        tensorflow::errors::InvalidArgument(
                            "tfring.reducescatter needs tensors of rank >= 1 (it splits the first "
                            "dimension over the ranks), got a scalar at position ", i),
                        done);
      TensorShape shape = in.shape();
      shape.set_dim(0, reducescatterRows(in.dim_size(0), size, rank));
      Tensor* out = nullptr;
      OP_REQUIRES_OK_ASYNC(ctx, ctx->allocate_output(i, shape, &out), done);
      req.tensors.push_back({in.tensor_data().data(), const_cast<char*>(out->tensor_data().data()),
                             static_cast<size_t>(in.TotalBytes()), dims(in.shape())});
    }
    req.done = finisher(ctx, done);
    engine->enqueue(std::move(req));
  }

 private:
  ReduceOp op_ = ReduceOp::kSum;
  int set_ = 0;
};

class AlltoallOp : public AsyncOpKernel {
 public:
  explicit AlltoallOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("process_set", &set_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    auto rt = runtimeOrFail(ctx);
    if (!rt) return done();
    auto engine = engineOrFail(ctx, *rt, set_);
    if (!engine) return done();
    const Tensor& in = ctx->input(0);
    const Tensor& splits = ctx->input(1);
    OP_REQUIRES_ASYNC(ctx, splits.dims() == 1,
                      tensorflow::errors::InvalidArgument("tfring.alltoall: splits must be a vector of one row "
                                                          "count per rank, got shape ", splits.shape().DebugString()),
                      done);
    Request req;
    req.kind = OpKind::kAlltoall;
    req.name = name();
    OP_REQUIRES_ASYNC(ctx, coreType(in.dtype(), &req.type),
                      tensorflow::errors::InvalidArgument("tfring: unsupported dtype"), done);
    // The engine checks the tensor's rank and the splits (count, signs, sum) before the exchange.
    for (int64_t d = 0; d < splits.NumElements(); ++d) req.splits.push_back(splits.vec<int64_t>()(d));
    req.tensors.push_back({in.tensor_data().data(), nullptr, static_cast<size_t>(in.TotalBytes()),
                           dims(in.shape())});
    TensorShape shape = in.shape();
    req.allocate = [ctx, shape](const std::vector<int64_t>& fromEach, std::string* error) mutable -> void* {
      int64_t total = 0;
      for (int64_t d : fromEach) total += d;
      shape.set_dim(0, total);
      Tensor *out = nullptr, *received = nullptr;
      absl::Status s = ctx->allocate_output(0, shape, &out);
      if (s.ok()) s = ctx->allocate_output(1, TensorShape({static_cast<int64_t>(fromEach.size())}), &received);
      if (!s.ok()) {
        *error = std::string(s.message());
        return nullptr;
      }
      for (size_t k = 0; k < fromEach.size(); ++k) received->vec<int64_t>()(k) = fromEach[k];
      return const_cast<char*>(out->tensor_data().data());
    };
    req.done = finisher(ctx, done);
    engine->enqueue(std::move(req));
  }

 private:
  int set_ = 0;
};

class BarrierOp : public AsyncOpKernel {
 public:
  explicit BarrierOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("label", &label_));
    OP_REQUIRES_OK(c, c->GetAttr("process_set", &set_));
  }
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    auto rt = runtimeOrFail(ctx);
    if (!rt) return done();
    auto engine = engineOrFail(ctx, *rt, set_);
    if (!engine) return done();
    Request req;
    req.kind = OpKind::kBarrier;
    req.name = label_.empty() ? name() : label_;
    req.done = finisher(ctx, done);
    engine->enqueue(std::move(req));
  }

 private:
  std::string label_;
  int set_ = 0;
};

class JoinOp : public AsyncOpKernel {
 public:
  explicit JoinOp(OpKernelConstruction* c) : AsyncOpKernel(c) {}
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    auto rt = runtimeOrFail(ctx);
    if (!rt) return done();
    Tensor* last = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->allocate_output(0, TensorShape({}), &last), done);
    Request req;
    req.kind = OpKind::kJoin;
    req.name = name();
    req.joined = [last](int rank) { last->scalar<int32_t>()() = rank; };
    req.done = finisher(ctx, done);
    rt->engine().enqueue(std::move(req));
  }
};

REGISTER_KERNEL_BUILDER(Name("TfringAllreduce").Device(tensorflow::DEVICE_CPU), AllreduceOp);
REGISTER_KERNEL_BUILDER(Name("TfringBroadcast").Device(tensorflow::DEVICE_CPU), BroadcastOp);
REGISTER_KERNEL_BUILDER(Name("TfringAllgather").Device(tensorflow::DEVICE_CPU), AllgatherOp);
REGISTER_KERNEL_BUILDER(Name("TfringReducescatter").Device(tensorflow::DEVICE_CPU), ReducescatterOp);
REGISTER_KERNEL_BUILDER(Name("TfringAlltoall").Device(tensorflow::DEVICE_CPU), AlltoallOp);
REGISTER_KERNEL_BUILDER(Name("TfringBarrier").Device(tensorflow::DEVICE_CPU), BarrierOp);
REGISTER_KERNEL_BUILDER(Name("TfringJoin").Device(tensorflow::DEVICE_CPU), JoinOp);

}  // namespace
}  // namespace tfring
