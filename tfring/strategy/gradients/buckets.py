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

from tfring import config
from tfring.ops import collectives


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


# How far past `bucket_bytes` a bucket of gradients for their owners may grow to balance its owners.
OWNER_BUCKET_GROWTH = 8


def plan_by_owners(tensors, owners, bucket_bytes, size):
    """Cuts `tensors` into buckets as `plan` does, for gradients reduced to their owners
    (`reduction.reduce_to_owners`): a bucket closes once it reaches `bucket_bytes` *and* its least
    served owner holds at least half an even share of it, or once it reaches `OWNER_BUCKET_GROWTH`
    times `bucket_bytes`. A bucket of one owner's gradients would send data one way only, each other
    rank to that owner, while the other direction of every link idles: each collective then takes
    twice as long as a balanced one (2 ranks).

    Args:
        tensors: a list of tensors, in the order of their variables.
        owners: each tensor's owner rank.
        bucket_bytes: as for `plan` (0: one bucket).
        size: the number of ranks.

    Returns:
        A list of lists of indices into `tensors`.

    Example:

    >>> plan_by_owners([tf.zeros([4]), tf.zeros([4]), tf.zeros([4])], [0, 1, 0], bucket_bytes=16, size=2)
    [[2, 1], [0]]
    """
    if not bucket_bytes:
        return plan(tensors, bucket_bytes)
    buckets, current, filled, held = [], [], 0, [0] * size
    for i in reversed(range(len(tensors))):
        current.append(i)
        nbytes = _nbytes(tensors[i])
        nbytes = bucket_bytes if nbytes is None else nbytes
        filled += nbytes
        held[owners[i]] += nbytes
        balanced = min(held) * 2 * size >= filled
        if (filled >= bucket_bytes and balanced) or filled >= OWNER_BUCKET_GROWTH * bucket_bytes:
            buckets.append(current)
            current, filled, held = [], 0, [0] * size
    if current:
        buckets.append(current)
    return buckets


def untuned(bucket_bytes):
    """The bytes per bucket a setting stands for before any tuning: `"auto"` starts from the default.

    Args:
        bucket_bytes: a setting (`RingStrategy(bucket_bytes=...)`, `TFRING_BUCKET_BYTES`).

    Returns:
        An int.

    Example:

    >>> untuned("auto") == config.Config.bucket_bytes
    True
    """
    return config.Config.bucket_bytes if bucket_bytes == "auto" else bucket_bytes


def on_device(bucket_bytes, on_cpu):
    """This rank's setting where its gradients live: 0 (one collective after the backward pass)
    off the CPU, since the start/done ops of a bucket have CPU kernels only.

    Args:
        bucket_bytes: a setting.
        on_cpu: whether the gradients are on a CPU.

    Returns:
        `bucket_bytes` or 0.
    """
    return bucket_bytes if on_cpu else 0


def agreed(bucket_bytes, device, size):
    """The job's `bucket_bytes`: 0 unless every rank's replica is on a CPU.

    The start/done ops of a bucket have CPU kernels only, so a GPU replica reduces its gradients
    in one collective after the backward pass; every rank must cut its gradients alike, so one
    GPU rank turns buckets off for the whole job (one small collective, at the strategy's start).

    Args:
        bucket_bytes: this rank's setting (the same on every rank, or the first step fails with a
            mismatch error naming the tensors).
        device: this rank's replica device string.
        size: the number of ranks.

    Returns:
        `bucket_bytes` or 0.

    Example:

    >>> agreed(4 << 20, "/cpu:0", 2)
    4194304
    """
    on_cpu = tf.DeviceSpec.from_string(device).device_type in (None, "CPU")
    if not bucket_bytes or size == 1:
        return on_device(bucket_bytes, on_cpu)
    everywhere = collectives.allreduce(tf.constant(1 if on_cpu else 0, tf.int32), op="min")
    return on_device(bucket_bytes, int(everywhere) == 1)
