"""The gradients of the collectives: an allreduce's gradient is the allreduce of its gradients, a
broadcast's goes back to the root, an allgather's is this rank's rows of the summed gradient, a
reduce-scatter's the allgather of its gradients, an all-to-all's travels back where it came from.

Registered when `tfring.ops` is first imported (its `__init__`).
"""

import tensorflow as tf

from tfring.ops import collectives


@tf.RegisterGradient("TfringAllreduce")
def _allreduce_grad(op, *grads):
    reduce_op = op.get_attr("reduce_op")
    reduce_op = reduce_op.decode() if isinstance(reduce_op, bytes) else reduce_op
    if reduce_op not in ("sum", "mean"):
        return [None] * len(grads)
    grads = [tf.zeros_like(o) if g is None else g for g, o in zip(grads, op.outputs)]
    return collectives.allreduce(grads, op=reduce_op, process_set=op.get_attr("process_set"))


@tf.RegisterGradient("TfringRelay")
def _relay_grad(op, *grads):
    return list(grads)


@tf.RegisterGradient("TfringBroadcast")
def _broadcast_grad(op, *grads):
    root, process_set = op.get_attr("root_rank"), op.get_attr("process_set")  # root: a position in the set
    grads = [tf.zeros_like(o) if g is None else g for g, o in zip(grads, op.outputs)]
    if not grads[0].dtype.is_floating:
        return [None] * len(grads)
    summed = collectives.allreduce(grads, op="sum", process_set=process_set)
    if collectives.position("broadcast", process_set) == root:
        return summed
    with tf.control_dependencies(summed):  # a TF1 graph would otherwise prune the allreduce on this rank only
        return [tf.zeros_like(g) for g in summed]


@tf.RegisterGradient("TfringAllgather")
def _allgather_grad(op, grad):
    x, process_set = op.inputs[0], op.get_attr("process_set")
    if not grad.dtype.is_floating:
        return [None]
    grad = collectives.allreduce(grad, op="sum", process_set=process_set)
    rows = collectives.allgather(tf.shape(x, out_type=tf.int64)[:1], process_set=process_set)
    offset = tf.reduce_sum(rows[: collectives.position("allgather", process_set)])
    begin = tf.concat([[offset], tf.zeros([tf.rank(x) - 1], tf.int64)], 0)
    return tf.slice(grad, begin, tf.shape(x, out_type=tf.int64))


@tf.RegisterGradient("TfringReducescatter")
def _reducescatter_grad(op, *grads):
    reduce_op = op.get_attr("reduce_op")
    reduce_op = reduce_op.decode() if isinstance(reduce_op, bytes) else reduce_op
    if reduce_op not in ("sum", "mean") or not grads[0].dtype.is_floating:
        return [None] * len(grads)
    grads = [tf.zeros_like(o) if g is None else g for g, o in zip(grads, op.outputs)]
    # Every rank's share of the gradient, gathered: d(sum)/d(input) is the whole gathered gradient.
    process_set = op.get_attr("process_set")
    gathered = [collectives.allgather(g, process_set=process_set) for g in grads]
    if reduce_op == "mean":
        gathered = [g / tf.cast(collectives.set_size(process_set), g.dtype) for g in gathered]
    return gathered


@tf.RegisterGradient("TfringAlltoall")
def _alltoall_grad(op, grad, _):
    if not grad.dtype.is_floating:
        return [None, None]
    # The rows go back where they came from: the received splits are the way back.
    back, _ = collectives.alltoall(grad, splits=op.outputs[1], process_set=op.get_attr("process_set"))
    return [back, None]
