"""Gradient buckets: which gradients travel together, so communication overlaps the backward pass.

Keras asks for one all-reduce of the whole gradient list, after the backward pass has produced
every gradient. `RingStrategy` cuts that list into buckets of about `bucket_bytes` bytes, in the
order the backward pass produces gradients (the reverse of the variables' order: the last layer's
first), and all-reduces each bucket as soon as its own gradients exist
(`tfring.ops.allreduce_buckets`), so the first buckets travel while earlier layers' gradients are
still being computed: PyTorch DDP's design. Every rank cuts the same list the same way, so the
buckets' collectives line up across ranks.
"""

import tensorflow as tf


def _nbytes(tensor):
    elements = tf.TensorShape(tensor.shape).num_elements()
    # An unknown size counts as a full bucket: it travels alone rather than delaying its neighbours.
    return None if elements is None else elements * tf.as_dtype(tensor.dtype).size


def plan(tensors, bucket_bytes):
    """Cuts `tensors` (in the variables' order) into buckets, last tensor first.

    Args:
        tensors: a list of tensors (or variables: only shapes and dtypes count), in the order of
            the variables they belong to.
        bucket_bytes: about how many bytes a bucket holds: a bucket closes once it reaches this
            size. 0 gives one bucket of every tensor, in their own order.

    Returns:
        A list of lists of indices into `tensors`.

    Example:

    >>> plan([tf.zeros([4]), tf.zeros([4]), tf.zeros([8])], bucket_bytes=32)
    [[2], [1, 0]]
    """
    if not bucket_bytes:
        return [list(range(len(tensors)))] if tensors else []
    buckets, current, filled = [], [], 0
    for i in reversed(range(len(tensors))):
        current.append(i)
        size = _nbytes(tensors[i])
        filled = bucket_bytes if size is None else filled + size
        if filled >= bucket_bytes:
            buckets.append(current)
            current, filled = [], 0
    if current:
        buckets.append(current)
    return buckets


def applies(bucket_bytes, device):
    """Whether gradients on `device` are reduced in buckets (a graph, a CPU replica, buckets on).

    The start/done ops of a bucket have CPU kernels only; a GPU replica reduces its gradients in
    one collective after the backward pass.

    Args:
        bucket_bytes: the strategy's setting.
        device: the replica's device string.

    Returns:
        bool.

    Example:

    >>> applies(25 << 20, "/cpu:0")
    """
    return bool(bucket_bytes) and not tf.executing_eagerly() and "gpu" not in device.lower()
