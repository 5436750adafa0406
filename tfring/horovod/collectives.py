"""Horovod's collectives (`hvd.allreduce`, `hvd.allgather`, `hvd.broadcast`, ...) on `tfring.ops`.

Horovod's meaning, not `tfring.ops`': `allreduce` averages by default (`op=hvd.Average`), takes
`tf.IndexedSlices` (gathered as rows), `compression`, `prescale_factor` and `postscale_factor`;
the gradient of an allgather or a broadcast is averaged over the ranks (tfring.ops sums it), and
a broadcast's gradient is zero on every rank but the root. Integer types tfring's ring does not
reduce natively (int8, uint8, int16, uint16) travel widened to int32 and come back in their
own type, wrapping as Horovod's do; booleans travel as uint8 in allgather and broadcast. The
average of integers divides the sum by the number of ranks, truncating.
"""

import tensorflow as tf

from tfring import runtime
from tfring.horovod import basics
from tfring.horovod import compression as compression_lib
from tfring.horovod import process_sets
from tfring.ops import collectives as ring

NARROW_INTS = (tf.int8, tf.uint8, tf.int16, tf.uint16)  # travel widened to int32


def widened(tensor):
    """`tensor` in a type the ring carries, and the function that gives its own type back."""
    dtype = tensor.dtype
    if dtype in NARROW_INTS:
        return tf.cast(tensor, tf.int32), lambda t: tf.cast(t, dtype)
    if dtype == tf.bool:
        return tf.cast(tensor, tf.uint8), lambda t: tf.cast(t, tf.bool)
    return tensor, lambda t: t


def _scaled(tensor, factor):
    """`tensor * factor` in Horovod's arithmetic: integers in float64, float16 in float32, cast back
    (so integers truncate toward zero, as Horovod's C++ `static_cast` does)."""
    if factor == 1.0:
        return tensor
    dtype = tensor.dtype
    wide = tf.float64 if dtype.is_integer else tf.float32 if dtype == tf.float16 else dtype
    return tf.cast(tf.cast(tensor, wide) * tf.constant(float(factor), wide), dtype)


def _reduce_dense(tensors, op, compression, prescale_factor, postscale_factor, process_set, collective=ring.allreduce,
                  where="hvd.allreduce"):
    """One fused reduction (`collective`: allreduce or reducescatter) over tfring process set
    `process_set`, scaled in each tensor's own (compressed) type before and after, as Horovod does."""
    tfring_op = basics.tfring_op(op, where, len(runtime.process_set_ranks(process_set)))
    compressed, contexts = zip(*[compression.compress(tf.convert_to_tensor(t)) for t in tensors])
    wide, narrows = zip(*[widened(_scaled(t, prescale_factor)) for t in compressed])
    reduced = collective(list(wide), op=tfring_op, process_set=process_set)
    return [compression.decompress(_scaled(narrow(r), postscale_factor), ctx)
            for r, narrow, ctx in zip(reduced, narrows, contexts)]


def _reduce_slices(slices, op, prescale_factor, postscale_factor, process_set):
    if op not in (basics.Sum, basics.Average):
        raise NotImplementedError("hvd.allreduce: only hvd.Sum and hvd.Average are supported with tf.IndexedSlices")
    if prescale_factor != 1.0 or postscale_factor != 1.0:
        raise NotImplementedError("hvd.allreduce: pre/postscale factors are not supported with tf.IndexedSlices")
    values, indices = ring.allgather_slices(slices, process_set, gather_values=lambda v: _gather(v, process_set))
    if op == basics.Average:
        values = values / tf.cast(len(runtime.process_set_ranks(process_set)), values.dtype)
    return tf.IndexedSlices(values, indices, slices.dense_shape)


def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="",
                      compression=compression_lib.Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=process_sets.global_process_set):
    """Reduces a list of tensors across the ranks in one fused collective (Horovod's `hvd.grouped_allreduce`).

    Args:
        tensors: a list of `tf.Tensor`, `tf.Variable` or `tf.IndexedSlices`, the same shapes on every rank.
        average: deprecated; use `op`.
        device_dense: ignored (tfring places the collective with its input).
        device_sparse: ignored.
        compression: `hvd.Compression.none` (default) or `hvd.Compression.fp16`.
        op: `hvd.Average` (default), `hvd.Sum`, `hvd.Adasum` (floating tensors, a power-of-two
            number of ranks: `tfring.ops.allreduce`'s "adasum"), `hvd.Min`, `hvd.Max` or `hvd.Product`.
        prescale_factor: multiplies each tensor before the reduction.
        postscale_factor: multiplies each result.
        process_set: the `hvd.ProcessSet` to run over (default: every rank); only its ranks call it.

    Returns:
        A list like `tensors`, reduced; identical on every rank.

    Example:

    >>> hvd.grouped_allreduce([tf.ones([2]), tf.ones([3])], op=hvd.Sum)
    """
    set_id = process_sets.set_id(process_set, "hvd.grouped_allreduce")
    op = basics.handle_average_backwards_compatibility(op, average)
    tensors = list(tensors)
    out = [None] * len(tensors)
    dense = [k for k, t in enumerate(tensors) if not isinstance(t, tf.IndexedSlices)]
    for k in range(len(tensors)):
        if k not in dense:
            out[k] = _reduce_slices(tensors[k], op, prescale_factor, postscale_factor, set_id)
    if dense:
        reduced = _reduce_dense([tensors[k] for k in dense], op, compression, prescale_factor, postscale_factor,
                                set_id)
        for k, r in zip(dense, reduced):
            out[k] = r
    return out


def allreduce(tensor, average=None, device_dense="", device_sparse="", compression=compression_lib.Compression.none,
              op=None, prescale_factor=1.0, postscale_factor=1.0, name=None,
              process_set=process_sets.global_process_set, ignore_name_scope=False):
    """Reduces a tensor across the ranks (Horovod's `hvd.allreduce`; averages by default).

    A `tf.IndexedSlices` is allgathered (its rows and their indices), as Horovod does.

    Args:
        tensor: a `tf.Tensor`, `tf.Variable` or `tf.IndexedSlices`, the same shape on every rank.
        average: deprecated; use `op`.
        device_dense: ignored (tfring places the collective with its input).
        device_sparse: ignored.
        compression: `hvd.Compression.none` (default) or `hvd.Compression.fp16`.
        op: `hvd.Average` (default), `hvd.Sum`, `hvd.Adasum` (floating tensors, a power-of-two
            number of ranks: `tfring.ops.allreduce`'s "adasum"), `hvd.Min`, `hvd.Max` or `hvd.Product`.
        prescale_factor: multiplies the tensor before the reduction.
        postscale_factor: multiplies the result.
        name: ignored (tfring matches collectives by their order).
        process_set: the `hvd.ProcessSet` to run over (default: every rank); only its ranks call it.
        ignore_name_scope: ignored.

    Returns:
        The reduced tensor, identical on every rank. Its gradient is the incoming gradient reduced
        the same way for Average and Sum; Adasum, Min, Max and Product have no gradient here (None).

    Example:

    >>> hvd.allreduce(tf.constant([1.0, 2.0]))   # the mean over the ranks
    """
    return grouped_allreduce([tensor], average, compression=compression, op=op, prescale_factor=prescale_factor,
                             postscale_factor=postscale_factor, process_set=process_set)[0]


def _my_rows(gathered, first_dims, process_set):
    """This rank's rows of `gathered`, given every member's first dimension."""
    offsets = tf.concat([[0], tf.cumsum(first_dims)], 0)
    me = runtime.process_set_ranks(process_set).index(runtime.rank())
    return gathered[offsets[me]:offsets[me + 1]]


def _gather(tensor, process_set):
    """Horovod's allgather over tfring process set `process_set` (an id), with Horovod's gradient."""
    tensor = tf.convert_to_tensor(tensor)
    if tensor.shape.rank == 0:
        tensor = tf.reshape(tensor, [1])

    @tf.custom_gradient
    def gather(x):
        wide, narrow = widened(x)
        gathered = narrow(ring.allgather(wide, process_set=process_set))

        def grad(dy):
            first_dims = ring.allgather(tf.shape(x, out_type=tf.int64)[:1], process_set=process_set)
            return _my_rows(ring.allreduce(dy, op="mean", process_set=process_set), first_dims, process_set)

        return gathered, grad

    return gather(tensor)


def allgather(tensor, name=None, ignore_name_scope=False, process_set=process_sets.global_process_set):
    """Concatenates every rank's tensor along the first dimension (Horovod's `hvd.allgather`).

    Ranks may pass different first dimensions; the other dimensions must agree. The gradient is
    Horovod's: the incoming gradient averaged over the ranks, this rank's rows of it.

    Args:
        tensor: a tensor of rank >= 1 (a scalar is gathered as a vector of one element per rank).
        name: ignored.
        ignore_name_scope: ignored.
        process_set: the `hvd.ProcessSet` to run over (default: every rank); only its ranks call it.

    Returns:
        The concatenation, in rank order; identical on every rank.

    Example:

    >>> hvd.allgather(tf.fill([hvd.rank() + 1, 2], float(hvd.rank())))
    """
    return _gather(tensor, process_sets.set_id(process_set, "hvd.allgather"))


def grouped_allgather(tensors, name=None, ignore_name_scope=False, process_set=process_sets.global_process_set):
    """`allgather` of each tensor in a list (Horovod's `hvd.grouped_allgather`).

    Returns:
        A list of the gathered tensors.
    """
    return [allgather(t, process_set=process_set) for t in tensors]


def barrier(process_set=process_sets.global_process_set):
    """Waits until every rank reaches it (Horovod's `hvd.barrier`)."""
    return ring.barrier(process_set=process_sets.set_id(process_set, "hvd.barrier"))


def join(device=""):
    """Says this rank is out of data and waits until every rank has (Horovod's `hvd.join`).

    Until every rank has joined, this rank takes part in the others' allreduces with zeros, so a
    `hvd.Sum` counts the ranks still training and `hvd.Average` still divides by `hvd.size()`, as
    Horovod does. Other collectives fail on the ranks that call them while a rank has joined
    (`tf.errors.FailedPreconditionError`), as Horovod's do.

    Args:
        device: ignored.

    Returns:
        The rank that joined last (an int32 scalar tensor, the same on every rank).

    Example:

    >>> for images, labels in dataset.shard(hvd.size(), hvd.rank()):   # uneven shards
    ...     training_step(images, labels)
    >>> hvd.join()
    """
    del device
    return ring.join()


def grouped_reducescatter(tensors, device_dense="", compression=compression_lib.Compression.none, op=basics.Average,
                          process_set=process_sets.global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Reduces a list of tensors and gives each rank its share of the rows, as one fused collective
    (Horovod's `hvd.grouped_reducescatter`).

    Of a first dimension of `R` rows over `P` ranks, rank `r` gets `R // P` rows, one more when
    `r < R % P`. The gradient is Horovod's: the incoming gradients gathered from every rank,
    multiplied by the number of ranks for `hvd.Sum` (as is for `hvd.Average`) and by the scale
    factors (`tfring.ops.reducescatter`'s is the exact one: gathered, divided for a mean).

    Args:
        tensors: a list of tensors of rank >= 1, the same shapes on every rank.
        device_dense: ignored (tfring places the collective with its input).
        compression: `hvd.Compression.none` (default) or `hvd.Compression.fp16`.
        op: `hvd.Average` (default), `hvd.Sum`, `hvd.Min`, `hvd.Max` or `hvd.Product`.
        process_set: the `hvd.ProcessSet` to run over (default: every rank); only its ranks call it.
        prescale_factor: multiplies each tensor before the reduction.
        postscale_factor: multiplies each result.

    Returns:
        A list of this rank's rows of each reduced tensor.

    Example:

    >>> hvd.grouped_reducescatter([tf.ones([4, 2]), tf.ones([3])], op=hvd.Sum)
    """
    set_id = process_sets.set_id(process_set, "hvd.grouped_reducescatter")
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    if not tensors:
        return tensors
    op = basics.Average if op is None else op
    set_size = len(runtime.process_set_ranks(set_id))
    gradient_scale = (set_size if op == basics.Sum else 1) * prescale_factor * postscale_factor

    @tf.custom_gradient
    def scatter(*xs):
        out = _reduce_dense(xs, op, compression, prescale_factor, postscale_factor, set_id, ring.reducescatter,
                            "hvd.reducescatter")

        def grad(*dys):
            return [ring.allgather(dy, process_set=set_id) * tf.cast(gradient_scale, dy.dtype)
                    if dy.dtype.is_floating else None
                    for dy in dys]

        return out, grad

    return list(scatter(*tensors))


def reducescatter(tensor, device_dense="", compression=compression_lib.Compression.none, op=basics.Average,
                  name=None, process_set=process_sets.global_process_set, ignore_name_scope=False,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduces a tensor and gives each rank its share of the rows (Horovod's `hvd.reducescatter`).

    As `grouped_reducescatter` for one tensor.

    Args:
        tensor: a tensor of rank >= 1, the same shape on every rank.
        device_dense: ignored.
        compression: `hvd.Compression.none` (default) or `hvd.Compression.fp16`.
        op: `hvd.Average` (default), `hvd.Sum`, `hvd.Min`, `hvd.Max` or `hvd.Product`.
        name: ignored (tfring matches collectives by their order).
        process_set: the `hvd.ProcessSet` to run over (default: every rank); only its ranks call it.
        ignore_name_scope: ignored.
        prescale_factor: multiplies the tensor before the reduction.
        postscale_factor: multiplies the result.

    Returns:
        This rank's rows of the reduced tensor.

    Example:

    >>> hvd.reducescatter(tf.ones([4, 2]), op=hvd.Sum)   # on 2 ranks: [[2, 2], [2, 2]]
    """
    return grouped_reducescatter([tensor], compression=compression, op=op, process_set=process_set,
                                 prescale_factor=prescale_factor, postscale_factor=postscale_factor)[0]


def alltoall(tensor, splits=None, name=None, ignore_name_scope=False, process_set=process_sets.global_process_set):
    """Sends rows of `tensor` to every rank; returns the rows every rank sent this one (Horovod's `hvd.alltoall`).

    The first `splits[0]` rows go to rank 0, the next `splits[1]` to rank 1, ...; without
    `splits` the first dimension is cut evenly. The gradient sends the incoming gradient's rows
    back where they came from.

    Args:
        tensor: a tensor of rank >= 1; the dimensions after the first match on every rank.
        splits: optional list or 1-D integer tensor of one row count per rank.
        name: ignored.
        ignore_name_scope: ignored.
        process_set: the `hvd.ProcessSet` to run over (default: every rank); only its ranks call it.

    Returns:
        With `splits`: `(received, received_splits)`, the rows in rank order and how many came
        from each rank (int32). Without: `received` only, as Horovod returns.

    Example:

    >>> received, counts = hvd.alltoall(tf.range(4), splits=[1, 3])   # on 2 ranks
    """
    set_id = process_sets.set_id(process_set, "hvd.alltoall")
    tensor = tf.convert_to_tensor(tensor)
    wide, narrow = widened(tensor)
    received, counts = ring.alltoall(wide, splits=splits, process_set=set_id)
    received = narrow(received)
    return (received, tf.cast(counts, tf.int32)) if splits is not None else received


def rank_op(name=None):
    """This process's rank as a tensor (Horovod's `hvd.rank_op`)."""
    return tf.constant(runtime.rank(), tf.int32)


def size_op(process_set_id=0, name=None):
    """The size of the job, or of process set `process_set_id`, as a tensor (Horovod's `hvd.size_op`)."""
    return tf.constant(len(runtime.process_set_ranks(process_set_id)), tf.int32)


def process_set_included_op(process_set_id=0, name=None):
    """1 when this rank is in process set `process_set_id`, else 0, as a tensor (Horovod's op)."""
    return tf.constant(int(runtime.rank() in runtime.process_set_ranks(process_set_id)), tf.int32)


def local_rank_op(name=None):
    """This process's rank on its host as a tensor (Horovod's `hvd.local_rank_op`)."""
    return tf.constant(runtime.local_rank(), tf.int32)


def local_size_op(name=None):
    """The number of ranks on this host as a tensor (Horovod's `hvd.local_size_op`)."""
    return tf.constant(runtime.local_size(), tf.int32)
