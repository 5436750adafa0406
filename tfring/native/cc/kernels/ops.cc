// Op registrations: names, attributes, shape functions and docs. The kernels live in
// collective_kernels.cc (the tensorflow/custom-op split of registration and implementation).
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

namespace {
// Output i has the shape of input i.
absl::Status sameShapes(InferenceContext* c) {
  for (int i = 0; i < c->num_inputs(); ++i) c->set_output(i, c->input(i));
  return absl::OkStatus();
}

// Output `out` has input `in`'s shape with the first dimension unknown (it differs per rank).
absl::Status firstDimUnknown(InferenceContext* c, int in, int out) {
  ShapeHandle shape = c->input(in);
  if (!c->RankKnown(shape)) {
    c->set_output(out, c->UnknownShape());
    return absl::OkStatus();
  }
  TF_RETURN_IF_ERROR(c->WithRankAtLeast(shape, 1, &shape));
  ShapeHandle result;
  TF_RETURN_IF_ERROR(c->ReplaceDim(shape, 0, c->UnknownDim(), &result));
  c->set_output(out, result);
  return absl::OkStatus();
}

// A start op: output i like input i (its first dimension unknown when `firstDimUnknownToo`),
// then the ticket.
absl::Status outputsThenTicket(InferenceContext* c, bool firstDimUnknownToo) {
  for (int i = 0; i < c->num_inputs(); ++i) {
    if (firstDimUnknownToo) {
      TF_RETURN_IF_ERROR(firstDimUnknown(c, i, i));
    } else {
      c->set_output(i, c->input(i));
    }
  }
  c->set_output(c->num_inputs(), c->Scalar());
  return absl::OkStatus();
}

// A done op: output i is buffer i (the last input is the ticket).
absl::Status passBuffers(InferenceContext* c) {
  for (int i = 0; i + 1 < c->num_inputs(); ++i) c->set_output(i, c->input(i));
  return absl::OkStatus();
}

}  // namespace

REGISTER_OP("TfringAllreduce")
    .SetIsDistributedCommunication()
    .Input("tensors: N * T")
    .Output("reduced: N * T")
    .Attr("T: {half, bfloat16, float, double, int32, int64}")
    .Attr("N: int >= 1")
    .Attr("reduce_op: {'sum', 'mean', 'min', 'max', 'product', 'adasum'} = 'sum'")
    .Attr("process_set: int >= 0 = 0")
    .SetIsStateful()
    .SetShapeFn(sameShapes)
    .Doc(R"doc(
Reduces every tensor of the list across all ranks of the tfring job, as one collective.
Each output has the shape of its input and holds the elementwise reduction over ranks.
)doc");

REGISTER_OP("TfringAllreduceStart")
    .SetIsDistributedCommunication()
    .Input("tensors: N * T")
    .Output("buffers: N * T")
    .Output("ticket: int64")
    .Attr("T: {half, bfloat16, float, double, int32, int64}")
    .Attr("N: int >= 1")
    .Attr("reduce_op: {'sum', 'mean', 'min', 'max', 'product', 'adasum'} = 'sum'")
    .Attr("process_set: int >= 0 = 0")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) { return outputsThenTicket(c, false); })
    .Doc(R"doc(
Starts the allreduce of a list, as TfringAllreduce does, and returns at once: `buffers` will hold
the result, which only TfringCollectiveDone(buffers, ticket) (or TfringAllreduceDone) may read,
once it has completed.
)doc");

REGISTER_OP("TfringAllreduceDone")
    .SetIsDistributedCommunication()
    .Input("buffers: N * T")
    .Input("ticket: int64")
    .Output("reduced: N * T")
    .Attr("T: {half, bfloat16, float, double, int32, int64}")
    .Attr("N: int >= 1")
    .SetIsStateful()
    .SetShapeFn(passBuffers)
    .Doc(R"doc(
Completes when the allreduce started by TfringAllreduceStart has; `reduced` are its buffers.
Kept for graphs built before TfringCollectiveDone, which completes any started collective.
)doc");

REGISTER_OP("TfringAllgatherStart")
    .SetIsDistributedCommunication()
    .Input("tensor: T")
    .Output("gathered: T")
    .Output("ticket: int64")
    .Attr("T: {half, bfloat16, float, double, int32, int64, uint8, bool}")
    .Attr("process_set: int >= 0 = 0")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) { return outputsThenTicket(c, true); })
    .Doc(R"doc(
Starts an allgather in which every rank sends as many rows, and returns at once; the result
(size x the rows, in rank order) may be read only through TfringCollectiveDone(gathered, ticket).
)doc");

REGISTER_OP("TfringAlltoallStart")
    .SetIsDistributedCommunication()
    .Input("tensor: T")
    .Output("received: T")
    .Output("ticket: int64")
    .Attr("T: {half, bfloat16, float, double, int32, int64, uint8, bool}")
    .Attr("process_set: int >= 0 = 0")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) { return outputsThenTicket(c, false); })
    .Doc(R"doc(
Starts an all-to-all of equal blocks (block d of the rows to rank d) and returns at once; the
blocks received, in rank order, may be read only through TfringCollectiveDone(received, ticket).
)doc");

REGISTER_OP("TfringReducescatterStart")
    .SetIsDistributedCommunication()
    .Input("tensors: N * T")
    .Output("scattered: N * T")
    .Output("ticket: int64")
    .Attr("T: {half, bfloat16, float, double, int32, int64}")
    .Attr("N: int >= 1")
    .Attr("reduce_op: {'sum', 'mean', 'min', 'max', 'product'} = 'sum'")
    .Attr("process_set: int >= 0 = 0")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) { return outputsThenTicket(c, true); })
    .Doc(R"doc(
Starts the reduce-scatter of a list, as TfringReducescatter does, and returns at once; each
rank's rows may be read only through TfringCollectiveDone(scattered, ticket).
)doc");

REGISTER_OP("TfringReduceToOwnersStart")
    .SetIsDistributedCommunication()
    .Input("tensors: N * T")
    .Output("reduced: M * T")
    .Output("ticket: int64")
    .Attr("T: {half, bfloat16, float, double, int32, int64}")
    .Attr("N: int >= 1")
    .Attr("M: int >= 0")
    .Attr("owners: list(int)")
    .Attr("owned: list(int)")
    .Attr("reduce_op: {'sum', 'mean', 'min', 'max', 'product'} = 'sum'")
    .Attr("process_set: int >= 0 = 0")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      std::vector<int32_t> owned;
      TF_RETURN_IF_ERROR(c->GetAttr("owned", &owned));
      if (static_cast<int>(owned.size()) + 1 != c->num_outputs()) {
        return tensorflow::errors::InvalidArgument("TfringReduceToOwnersStart: M must be the length of owned");
      }
      for (size_t k = 0; k < owned.size(); ++k) {
        if (owned[k] < 0 || owned[k] >= c->num_inputs()) {
          return tensorflow::errors::InvalidArgument("TfringReduceToOwnersStart: owned position ", owned[k],
                                                     " is not an input");
        }
        c->set_output(static_cast<int>(k), c->input(owned[k]));
      }
      c->set_output(c->num_outputs() - 1, c->Scalar());
      return absl::OkStatus();
    })
    .Doc(R"doc(
Starts reducing a list so that tensor i arrives, reduced whole, on rank owners[i] alone, and
returns at once; `owned` are this rank's positions (owners[i] == its rank), in order, and
`reduced` their reductions, readable only through TfringCollectiveDone(reduced, ticket).
)doc");

REGISTER_OP("TfringCollectiveDone")
    .SetIsDistributedCommunication()
    .Input("buffers: N * T")
    .Input("ticket: int64")
    .Output("result: N * T")
    .Attr("T: {half, bfloat16, float, double, int32, int64, uint8, bool}")
    .Attr("N: int >= 1")
    .SetIsStateful()
    .SetShapeFn(passBuffers)
    .Doc(R"doc(
Completes when the collective a Tfring*Start op started has; `result` are its buffers.
)doc");

REGISTER_OP("TfringRelay")
    .Input("tensors: N * T")
    .Output("relayed: N * T")
    .Attr("T: type")
    .Attr("N: int >= 1")
    .SetShapeFn(sameShapes)
    .Doc(R"doc(
Passes its inputs through (relay_kernel.cc): placed after an asynchronous collective of several
outputs, so that TensorFlow runs their consumers inline instead of one thread-pool task each.
)doc");

REGISTER_OP("TfringBroadcast")
    .SetIsDistributedCommunication()
    .Input("tensors: N * T")
    .Output("broadcast: N * T")
    .Attr("T: {half, bfloat16, float, double, int32, int64, uint8, bool}")
    .Attr("N: int >= 1")
    .Attr("root_rank: int >= 0 = 0")
    .Attr("process_set: int >= 0 = 0")
    .SetIsStateful()
    .SetShapeFn(sameShapes)
    .Doc(R"doc(
Copies every tensor of the list from `root_rank` to all ranks.
)doc");

REGISTER_OP("TfringAllgather")
    .SetIsDistributedCommunication()
    .Input("tensor: T")
    .Output("gathered: T")
    .Attr("T: {half, bfloat16, float, double, int32, int64, uint8, bool}")
    .Attr("process_set: int >= 0 = 0")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) { return firstDimUnknown(c, 0, 0); })
    .Doc(R"doc(
Concatenates the tensor of every rank along the first dimension, in rank order. The first
dimension may differ between ranks; the others must match.
)doc");

REGISTER_OP("TfringReducescatter")
    .SetIsDistributedCommunication()
    .Input("tensors: N * T")
    .Output("scattered: N * T")
    .Attr("T: {half, bfloat16, float, double, int32, int64}")
    .Attr("N: int >= 1")
    .Attr("reduce_op: {'sum', 'mean', 'min', 'max', 'product'} = 'sum'")
    .Attr("process_set: int >= 0 = 0")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      for (int i = 0; i < c->num_inputs(); ++i) TF_RETURN_IF_ERROR(firstDimUnknown(c, i, i));
      return absl::OkStatus();
    })
    .Doc(R"doc(
Reduces every tensor of the list across all ranks and gives each rank its share of the rows: of
a first dimension of R rows over P ranks, rank r gets R / P rows, one more when r < R % P, in
rank order (Horovod's split). The whole shapes must match on every rank.
)doc");

REGISTER_OP("TfringAlltoall")
    .SetIsDistributedCommunication()
    .Input("tensor: T")
    .Input("splits: int64")
    .Output("received: T")
    .Output("received_splits: int64")
    .Attr("T: {half, bfloat16, float, double, int32, int64, uint8, bool}")
    .Attr("process_set: int >= 0 = 0")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(1, c->Vector(c->UnknownDim()));
      return firstDimUnknown(c, 0, 0);
    })
    .Doc(R"doc(
Sends splits[d] rows of `tensor` (in order: the first splits[0] rows to rank 0, ...) to each
rank d, and returns the rows every rank sent this one, in rank order, with how many came from
each rank. The dimensions after the first must match on every rank.
)doc");

REGISTER_OP("TfringBarrier")
    .Attr("label: string = ''")
    .SetIsDistributedCommunication()
    .Attr("process_set: int >= 0 = 0")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::NoOutputs)
    .Doc(R"doc(
Completes once every rank has reached it.

label: what the barrier is for, named in errors (eager ops have no name of their own).
)doc");

REGISTER_OP("TfringJoin")
    .Output("last_joined: int32")
    .SetIsDistributedCommunication()
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::ScalarShape)
    .Doc(R"doc(
Says this rank is out of data (Horovod's join): until every rank has joined, it takes part in the
other ranks' allreduces (sum and mean) with zeros. Returns the rank that joined last.
)doc");

REGISTER_OP("TfringLarsUpdate")
    .Input("var: resource")
    .Input("velocity: resource")
    .Input("grad: T")
    .Input("lr: float")
    .Output("trust_ratio: float")
    .Attr("T: {half, float, double}")
    .Attr("momentum: float")
    .Attr("weight_decay: float = 0.0")
    .Attr("trust_coefficient: float = 0.001")
    .Attr("epsilon: float = 0.0")
    .Attr("adapt: bool = true")
    .Attr("nesterov: bool = false")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->Scalar());
      return absl::OkStatus();
    })
    .Doc(R"doc(
One LARS step for one variable, in place: the norms of `var` and `grad`, the trust ratio
trust_coefficient * |var| / (|grad| + weight_decay * |var| + epsilon) (1 when a norm is 0 or
`adapt` is false), then velocity = momentum * velocity + lr * ratio * (grad + weight_decay * var)
and var -= velocity (Nesterov: var -= momentum * velocity + lr * ratio * (grad + weight_decay * var)).
`velocity` is float32 for half and float variables, float64 for double ones. Returns the ratio.
)doc");
