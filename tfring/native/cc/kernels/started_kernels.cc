// Collectives started now and completed later (engine/tickets.h): a start op hands its collective
// to the engine and returns a ticket at once, so the next start op (chained after it, to keep
// every rank's submission order) follows as soon as its own inputs exist; the done op redeems the
// ticket and completes when the collective has. Outputs are allocated by the start op, so their
// shapes are known then: an allgather of equal row counts, an all-to-all of equal blocks, a
// reduce-scatter, an allreduce. Inputs and outputs are held until the collective has finished.
#include <memory>

#include "collective_kernels.h"
#include "tensorflow/core/platform/errors.h"

namespace tfring {

using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;

namespace {

using Held = std::vector<Tensor>;

TensorRef describe(const Tensor& in, Tensor* out) {
  return {in.tensor_data().data(), out ? const_cast<char*>(out->tensor_data().data()) : nullptr,
          static_cast<size_t>(in.TotalBytes()), dims(in.shape())};
}

// What the engine calls once every rank's row count is known: the output allocated already, if
// the ranks sent the rows `kind` expects.
std::function<void*(const std::vector<int64_t>&, std::string*)> preallocated(Tensor* out, int64_t rows,
                                                                            const std::string& what) {
  void* data = const_cast<char*>(out->tensor_data().data());
  return [data, rows, what](const std::vector<int64_t>& fromEach, std::string* error) -> void* {
    int64_t total = 0;
    for (int64_t d : fromEach) total += d;
    if (total == rows) return data;
    *error = what + ": the ranks sent " + std::to_string(total) + " rows in all where " + std::to_string(rows) +
             " were expected: every rank must start it with the same shape";
    return nullptr;
  };
}

// One input, one output of `shape` allocated now, whose rows the engine fills (allgather, alltoall).
absl::Status oneTensorInto(OpKernelContext* ctx, const TensorShape& shape, const std::string& what, Request* req,
                           Held* held) {
  const Tensor& in = ctx->input(0);
  Tensor* out = nullptr;
  TF_RETURN_IF_ERROR(ctx->allocate_output(0, shape, &out));
  req->tensors.push_back(describe(in, nullptr));
  req->allocate = preallocated(out, shape.dim_size(0), what);
  held->push_back(in);
  held->push_back(*out);
  return absl::OkStatus();
}

class StartOp : public tensorflow::OpKernel {
 public:
  StartOp(OpKernelConstruction* c, OpKind kind) : OpKernel(c), kind_(kind) {
    OP_REQUIRES_OK(c, c->GetAttr("process_set", &set_));
    if (kind == OpKind::kAllreduce || kind == OpKind::kReducescatter) {
      std::string op;
      OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &op));
      op_ = parseReduceOp(op);
    }
  }

  // Cheap (it only enqueues), so TF's executor runs it inline the moment its inputs exist,
  // rather than queueing it behind the rest of the backward pass (its queues run newest first).
  bool IsExpensive() override { return false; }

  void Compute(OpKernelContext* ctx) override {
    auto rt = runtimeOrFail(ctx);
    if (!rt) return;
    auto engine = engineOrFail(ctx, *rt, set_);
    if (!engine) return;
    Request req;
    req.kind = kind_;
    req.name = name();
    req.op = op_;
    OP_REQUIRES(ctx, coreType(ctx->input_dtype(0), &req.type),
                tensorflow::errors::InvalidArgument("tfring: unsupported dtype"));
    auto held = std::make_shared<Held>();
    OP_REQUIRES_OK(ctx, prepare(ctx, *engine, &req, held.get()));
    Tensor* ticket = nullptr;  // the last output
    OP_REQUIRES_OK(ctx, ctx->allocate_output(ctx->num_outputs() - 1, TensorShape({}), &ticket));
    ticket->scalar<int64_t>()() = static_cast<int64_t>(
        rt->tickets().start(std::move(req), held, [&engine](Request r) { engine->enqueue(std::move(r)); }));
  }

 protected:
  // Allocates the outputs, describes inputs and outputs in `req` and holds them in `held`.
  virtual absl::Status prepare(OpKernelContext* ctx, const Engine& engine, Request* req, Held* held) = 0;

 private:
  OpKind kind_;
  ReduceOp op_ = ReduceOp::kSum;
  int set_ = 0;
};

// A list in, the list reduced out (the bucket's allreduce).
class AllreduceStartOp : public StartOp {
 public:
  explicit AllreduceStartOp(OpKernelConstruction* c) : StartOp(c, OpKind::kAllreduce) {}

 protected:
  absl::Status prepare(OpKernelContext* ctx, const Engine&, Request* req, Held* held) override {
    TF_RETURN_IF_ERROR(describeList(ctx, ctx->num_inputs(), req));
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      held->push_back(ctx->input(i));
      held->push_back(*ctx->mutable_output(i));
    }
    return absl::OkStatus();
  }
};

absl::Status atLeastOneDimension(const Tensor& in, const char* what) {
  if (in.dims() >= 1) return absl::OkStatus();
  return tensorflow::errors::InvalidArgument("tfring.", what, " needs a tensor of rank >= 1, got a scalar");
}

// Every rank's rows, in rank order; every rank sends as many.
class AllgatherStartOp : public StartOp {
 public:
  explicit AllgatherStartOp(OpKernelConstruction* c) : StartOp(c, OpKind::kAllgather) {}

 protected:
  absl::Status prepare(OpKernelContext* ctx, const Engine& engine, Request* req, Held* held) override {
    const Tensor& in = ctx->input(0);
    TF_RETURN_IF_ERROR(atLeastOneDimension(in, "allgather_start"));
    TensorShape shape = in.shape();
    shape.set_dim(0, in.dim_size(0) * engine.size());
    return oneTensorInto(ctx, shape, "tfring.allgather_start", req, held);
  }
};

// Block d of size equal blocks of rows to rank d; the blocks for this rank, in rank order.
class AlltoallStartOp : public StartOp {
 public:
  explicit AlltoallStartOp(OpKernelConstruction* c) : StartOp(c, OpKind::kAlltoall) {}

 protected:
  absl::Status prepare(OpKernelContext* ctx, const Engine& engine, Request* req, Held* held) override {
    const Tensor& in = ctx->input(0);
    TF_RETURN_IF_ERROR(atLeastOneDimension(in, "alltoall_start"));
    const int64_t rows = in.dim_size(0);
    if (rows % engine.size() != 0) {
      return tensorflow::errors::InvalidArgument("tfring.alltoall_start: the first dimension (", rows,
                                                 ") must divide evenly by the number of ranks (", engine.size(), ")");
    }
    req->splits.assign(engine.size(), rows / engine.size());
    return oneTensorInto(ctx, in.shape(), "tfring.alltoall_start", req, held);
  }
};

// A list in; this rank's rows of each reduced tensor out (reducescatterRows).
class ReducescatterStartOp : public StartOp {
 public:
  explicit ReducescatterStartOp(OpKernelConstruction* c) : StartOp(c, OpKind::kReducescatter) {}

 protected:
  absl::Status prepare(OpKernelContext* ctx, const Engine& engine, Request* req, Held* held) override {
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      const Tensor& in = ctx->input(i);
      TF_RETURN_IF_ERROR(atLeastOneDimension(in, "reducescatter_start"));
      TensorShape shape = in.shape();
      shape.set_dim(0, reducescatterRows(in.dim_size(0), engine.size(), engine.rank()));
      Tensor* out = nullptr;
      TF_RETURN_IF_ERROR(ctx->allocate_output(i, shape, &out));
      req->tensors.push_back(describe(in, out));
      held->push_back(in);
      held->push_back(*out);
    }
    return absl::OkStatus();
  }
};

// A list in; the tensors this rank owns, each reduced whole, out (Request::owners): attr `owners`
// gives each tensor's rank, `owned` this rank's positions, in order (for the output shapes).
class ReduceToOwnersStartOp : public StartOp {
 public:
  explicit ReduceToOwnersStartOp(OpKernelConstruction* c) : StartOp(c, OpKind::kReducescatter) {
    OP_REQUIRES_OK(c, c->GetAttr("owners", &owners_));
    OP_REQUIRES_OK(c, c->GetAttr("owned", &owned_));
  }

 protected:
  absl::Status prepare(OpKernelContext* ctx, const Engine& engine, Request* req, Held* held) override {
    const int n = ctx->num_inputs();
    if (static_cast<int>(owners_.size()) != n) {
      return tensorflow::errors::InvalidArgument("tfring.reduce_to_owners_start: ", owners_.size(), " owners for ", n,
                                                 " tensors");
    }
    std::vector<int> mine;
    for (int i = 0; i < n; ++i) {
      if (owners_[i] == engine.rank()) mine.push_back(i);
    }
    if (mine != std::vector<int>(owned_.begin(), owned_.end())) {
      return tensorflow::errors::InvalidArgument("tfring.reduce_to_owners_start: the positions built as this rank's "
                                                 "do not match the owners for rank ", engine.rank());
    }
    size_t next = 0;
    for (int i = 0; i < n; ++i) {
      const Tensor& in = ctx->input(i);
      Tensor* out = nullptr;
      if (next < mine.size() && mine[next] == i) {  // reduced in place where TF allows
        TF_RETURN_IF_ERROR(ctx->forward_input_or_allocate_output({i}, next++, in.shape(), &out));
      }
      req->tensors.push_back(describe(in, out));
      held->push_back(in);
      if (out) held->push_back(*out);
    }
    req->owners.assign(owners_.begin(), owners_.end());
    return absl::OkStatus();
  }

 private:
  std::vector<int32_t> owners_, owned_;
};

// The second half of any of them: completes when the ticket's collective has, passing its buffers on.
class DoneOp : public tensorflow::AsyncOpKernel {
 public:
  explicit DoneOp(OpKernelConstruction* c) : AsyncOpKernel(c) {}

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    auto rt = runtimeOrFail(ctx);
    if (!rt) return done();
    const int n = ctx->num_inputs() - 1;
    const auto ticket = static_cast<uint64_t>(ctx->input(n).scalar<int64_t>()());
    rt->tickets().redeem(ticket, [ctx, done, n](const Status& s) {
      if (s.ok()) {
        for (int i = 0; i < n; ++i) ctx->set_output(i, ctx->input(i));
      } else {
        ctx->SetStatus(toTf(s));
      }
      done();
    });
  }
};

REGISTER_KERNEL_BUILDER(Name("TfringAllreduceStart").Device(tensorflow::DEVICE_CPU), AllreduceStartOp);
REGISTER_KERNEL_BUILDER(Name("TfringAllgatherStart").Device(tensorflow::DEVICE_CPU), AllgatherStartOp);
REGISTER_KERNEL_BUILDER(Name("TfringAlltoallStart").Device(tensorflow::DEVICE_CPU), AlltoallStartOp);
REGISTER_KERNEL_BUILDER(Name("TfringReducescatterStart").Device(tensorflow::DEVICE_CPU), ReducescatterStartOp);
REGISTER_KERNEL_BUILDER(Name("TfringReduceToOwnersStart").Device(tensorflow::DEVICE_CPU), ReduceToOwnersStartOp);
REGISTER_KERNEL_BUILDER(Name("TfringAllreduceDone").Device(tensorflow::DEVICE_CPU), DoneOp);
REGISTER_KERNEL_BUILDER(Name("TfringCollectiveDone").Device(tensorflow::DEVICE_CPU), DoneOp);

}  // namespace
}  // namespace tfring
