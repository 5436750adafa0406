"""A step's outputs from every rank: what `RingStrategy.run` returns, so that Keras' per-replica
reduction gives global loss and metric logs and, for `predict`, the global predictions in order.

Each collective in a step is a point where the faster rank waits for the slower, so the scalars
(the loss and each metric, every step) travel together: one allgather per dtype, not one each.
"""

import tensorflow as tf
from tensorflow.python.distribute import values as values_lib

from tfring.ops import collectives


def gather(outputs, size, rows=None):
    """Every output of this rank -> a `PerReplica` of every rank's value, in rank order.

    Args:
        outputs: a structure of this rank's step outputs (tensors, or anything else, kept as is).
        size: the number of ranks.
        rows: the step's `StepRows`, or None; a rank without rows has no say in a boolean decision.

    Returns:
        The same structure with each numeric or boolean tensor replaced by a `PerReplica` of
        `size` values. A boolean scalar becomes one decision, true only where it is true on every
        rank (with rows), so that every rank takes the same branch. Strings and complex numbers
        are kept as they are.

    Example:

    >>> gather({"loss": loss, "accuracy": accuracy}, size=2)  # one allgather of 2 floats
    {'loss': PerReplica(rank 0's loss, rank 1's), 'accuracy': PerReplica(...)}
    """
    flat = tf.nest.flatten(outputs)
    result = list(flat)
    scalars = {}  # dtype -> positions in flat, in order: the same on every rank
    for i, value in enumerate(flat):
        if not _gathered(value):
            continue
        flat[i] = tensor = tf.convert_to_tensor(value)
        if tensor.shape.rank == 0 and tensor.dtype != tf.bool:
            scalars.setdefault(tensor.dtype, []).append(i)
        else:
            result[i] = _gather_one(tensor, size, rows)
    for positions in scalars.values():
        table = tf.reshape(collectives.allgather(tf.stack([flat[i] for i in positions])), [size, len(positions)])
        for column, i in enumerate(positions):
            result[i] = values_lib.PerReplica(tf.unstack(table[:, column], num=size))
    return tf.nest.pack_sequence_as(outputs, result)


def _gathered(value):
    if not isinstance(value, (tf.Tensor, tf.Variable)) and not hasattr(value, "dtype"):
        return False
    dtype = tf.as_dtype(value.dtype)
    return dtype != tf.string and not dtype.is_complex


def _gather_one(value, size, rows):
    if value.shape.rank == 0:  # a boolean decision (LossScaleOptimizer's "are the gradients finite?")
        # computed on each rank's un-reduced gradients must be one decision, or the ranks would take
        # different branches and fall out of step. A rank without rows has no say (its gradients
        # of nothing may be NaN, and it contributes zeros).
        vote = tf.cast(value, tf.int32)
        if rows is not None:
            vote = tf.where(rows.local > 0, vote, 1)
        everywhere = collectives.allreduce(vote, op="min") > 0
        return values_lib.PerReplica([everywhere] * size)
    gathered = collectives.allgather(value)
    sizes = collectives.allgather(tf.shape(value, out_type=tf.int64)[:1])
    return values_lib.PerReplica(tf.split(gathered, sizes, num=size))
