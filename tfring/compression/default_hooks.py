"""The built-in exact hook and the fp16/bf16 casts."""

import tensorflow as tf


def allreduce_hook(state, bucket):
    """The exact reduction: the bucket's gradients all-reduced as they are (the default hook).

    Args:
        state: unused.
        bucket: a `GradientBucket`.

    Returns:
        A `Future` of the reduced gradients.

    Example:

    >>> strategy.register_comm_hook(None, allreduce_hook)
    """
    del state
    return bucket.allreduce(bucket.gradients)


def narrowed(tensor, wire):
    """`tensor` cast to the wire dtype `wire` when it is floating (and not of it already).

    The one rule for what a narrow wire type carries: floats travel narrow, other dtypes as they are.

    Args:
        tensor: a tensor.
        wire: a floating dtype (e.g. `tf.float16`).

    Returns:
        A tensor.

    Example:

    >>> narrowed(tf.constant([1.5]), tf.float16).dtype
    tf.float16
    """
    return tf.cast(tensor, wire) if tensor.dtype.is_floating and tensor.dtype != wire else tensor


def restored(tensor, dtype):
    """`tensor` (as it arrived, perhaps narrowed) back in its own `dtype`.

    Args:
        tensor: a tensor.
        dtype: the dtype it had before `narrowed`.

    Returns:
        A tensor.

    Example:

    >>> restored(tf.constant([1.5], tf.float16), tf.float32).dtype
    tf.float32
    """
    return tf.cast(tensor, dtype) if tensor.dtype != dtype else tensor


def cast_hook(state, bucket):
    """Floating gradients travel cast to `state` (a narrower dtype) and are cast back on arrival.

    What `RingStrategy(compression="fp16")` or `"bf16"` registers: half the bytes on the wire, the
    ranks' sum rounded to the wire type (approximate, not equal to one process). Other dtypes
    travel as they are.

    Args:
        state: the wire dtype, e.g. `tf.float16`.
        bucket: a `GradientBucket`.

    Returns:
        A `Future` of the reduced gradients, in their own dtypes.

    Example:

    >>> strategy.register_comm_hook(tf.bfloat16, cast_hook)
    """
    wire = tf.as_dtype(state)
    grads = bucket.gradients
    return bucket.allreduce([narrowed(g, wire) for g in grads]).then(
        lambda reduced: [restored(r, g.dtype) for r, g in zip(reduced, grads)])
