"""Collective operations on tensors: allreduce, broadcast, allgather, reducescatter, alltoall, barrier.

Each call is ONE op node, also for a list of tensors, so a whole gradient list is reduced as a
single fused collective. The kernels are asynchronous: they hand the tensors to tfring's engine
and never block a TensorFlow inter-op thread.

Every rank must submit its collectives in the same order: each op is built with
`ordering.ordered`, which chains it to the graph's previous collective (see `ordering`).

Each collective takes `process_set`: 0 (the default) for every rank of the job, or the id of a
set `tfring.ops.add_process_set` made, to run over that set's ranks only, on a ring of their own.
Only the set's members call it; sets' collectives run independently of each other's. Ranks
stay job ranks everywhere (`root_rank`), results come in the set's rank order, and a mean
divides by the set's size.
"""

import tensorflow as tf

from tfring import checks
from tfring import runtime as _runtime
from tfring.native import library as _library
from tfring.ops import ordering

REDUCE_OPS = ("sum", "mean", "min", "max", "product")
ALLREDUCE_OPS = REDUCE_OPS + ("adasum",)  # Adasum combines whole tensors: the allreduce's alone
_REDUCE_DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64, tf.int32, tf.int64)
_COPY_DTYPES = _REDUCE_DTYPES + (tf.uint8, tf.bool)


def _ops():
    _runtime.init()
    return _library.load()[0]


def _check_dtypes(what, tensors, allowed):
    for i, t in enumerate(tensors):
        if t.dtype not in allowed:
            names = ", ".join(d.name for d in allowed)
            raise TypeError(f"tfring.{what}: tensor {i} has dtype {t.dtype.name}, which is not supported "
                            f"(supported: {names})")


def _dtype_groups(items):
    """The positions of `items` grouped by dtype, groups in order of first appearance (the same
    order on every rank, so the groups' collectives line up)."""
    groups = {}
    for i, t in enumerate(items):
        groups.setdefault(t.dtype, []).append(i)
    return list(groups.values())


def relayed(lib, outputs):
    """An asynchronous op's `outputs`, through one synchronous pass-through op when in a graph.

    When an asynchronous kernel finishes, TensorFlow schedules each consumer of its outputs as a
    thread-pool task of its own; a synchronous op's inexpensive consumers run inline on its
    thread. A list's results therefore cost one task instead of one per consumer (a few
    microseconds and often a thread wake-up each: milliseconds a step for 1000 gradients).

    Args:
        lib: the loaded op library.
        outputs: the outputs of one asynchronous collective op.

    Returns:
        A list of the same tensors.

    Example:

    >>> relayed(lib, lib.tfring_allreduce(grads))  # inside a tf.function
    """
    outputs = list(outputs)
    if len(outputs) < 2 or tf.executing_eagerly():
        return outputs
    return list(lib.tfring_relay(outputs))


def _one_op_per_dtype(items, make):
    """`make(lib, group)` for each dtype group of `items` (one op node takes one dtype), each
    ordered and relayed; the outputs as a list in the order of `items`."""
    lib = _ops()
    out = [None] * len(items)
    for idx in _dtype_groups(items):
        for i, r in zip(idx, relayed(lib, ordering.ordered(lambda idx=idx: make(lib, [items[i] for i in idx])))):
            out[i] = r
    return out


def _set_id(what, process_set):
    return checks.number(f"tfring.{what}", "process_set", process_set, integer=True, at_least=0)


def set_size(process_set):
    """The number of ranks in `process_set` (0: every rank).

    Args:
        process_set: a process set id.

    Returns:
        int.

    Example:

    >>> set_size(0) == tfring.size()
    True
    """
    return _runtime.size() if process_set == 0 else len(_runtime.process_set_ranks(process_set))


def position(what, process_set, rank=None):
    """`rank`'s (default: this rank's) position in `process_set`, which the kernels count in.

    Args:
        what: the public name being called, for the error.
        process_set: a process set id (0: every rank).
        rank: a job rank; default this rank.

    Returns:
        int.

    Raises:
        ValueError: `rank` is not in the set.

    Example:

    >>> position("allgather", 0) == tfring.rank()
    True
    """
    rank = _runtime.rank() if rank is None else rank
    if process_set == 0:
        return rank
    members = _runtime.process_set_ranks(process_set)
    if rank not in members:
        raise ValueError(f"tfring.{what}: rank {rank} is not in process set {process_set} (ranks {members})")
    return members.index(rank)


def _as_list(what, tensors, allowed):
    """(was a single tensor given, the tensors as a checked list)."""
    single = not isinstance(tensors, (list, tuple))
    items = [tf.convert_to_tensor(t) for t in ([tensors] if single else tensors)]
    _check_dtypes(what, items, allowed)
    return single, items


def allreduce(tensors, op="sum", name=None, process_set=0):
    """Reduces tensors elementwise across all ranks.

    Args:
        tensors: a tensor or a list of tensors (reduced together as one fused collective).
        op: "sum", "mean", "min", "max", "product" or "adasum". "mean" divides the sum by the
            number of ranks (a truncating division for integers). "adasum" combines the ranks'
            tensors pairwise, each tensor as a whole, as (1 - a·b/2|a|²) a + (1 - a·b/2|b|²) b
            (Horovod's `op=hvd.Adasum`: the sum of orthogonal tensors, the mean of parallel
            ones); floating dtypes and a power-of-two number of ranks only, and it has no gradient.
        name: optional op name.
        process_set: 0 (every rank) or a process set's id (see the module docstring).

    Returns:
        The reduced tensor, or a list of them, with the input shapes; identical on every rank.

    Raises:
        ValueError: `op` is not one of the reduce ops.
        TypeError: a dtype is not float16/bfloat16/float32/float64/int32/int64.
        tf.errors.InvalidArgumentError (at run time): no process set `process_set`, or this rank is not in it;
            "adasum" of integers or over a number of ranks that is not a power of two.
        tf.errors.FailedPreconditionError (at run time): ranks passed different shapes, counts or
            dtypes (Horovod's error type for the same case).
        tf.errors.UnavailableError (at run time): a rank died or stalled past the timeout.

    Example:

    >>> tfring.ops.allreduce(tf.constant([1.0, 2.0]), op="mean")
    <tf.Tensor: shape=(2,), dtype=float32, numpy=array([1., 2.], dtype=float32)>
    """
    checks.choice("tfring.allreduce", "op", op, ALLREDUCE_OPS)
    process_set = _set_id("allreduce", process_set)
    single, items = _as_list("allreduce", tensors, _REDUCE_DTYPES)
    if not items:
        return []
    result = _one_op_per_dtype(items, lambda lib, group: lib.tfring_allreduce(group, reduce_op=op, name=name,
                                                                              process_set=process_set))
    return result[0] if single else result


def broadcast(tensors, root_rank=0, name=None, process_set=0):
    """Copies tensors from `root_rank` to every rank.

    Args:
        tensors: a tensor or a list of tensors.
        root_rank: the rank whose values everyone receives (a job rank, also in a process set).
        name: optional op name.
        process_set: as for `allreduce`.

    Returns:
        The root's tensor (or list of tensors) on every rank.

    Example:

    >>> tfring.ops.broadcast(tf.constant(3), root_rank=0)
    <tf.Tensor: shape=(), dtype=int32, numpy=3>
    """
    root_rank = checks.number("tfring.broadcast", "root_rank", root_rank, integer=True, at_least=0)
    process_set = _set_id("broadcast", process_set)
    single, items = _as_list("broadcast", tensors, _COPY_DTYPES)
    if not items:
        return []
    if len({t.dtype for t in items}) > 1:
        return [broadcast(t, root_rank, name, process_set) for t in items]
    root = position("broadcast", process_set, root_rank)
    lib = _ops()
    result = relayed(lib, ordering.ordered(lambda: lib.tfring_broadcast(items, root_rank=root, name=name,
                                                                         process_set=process_set)))
    return result[0] if single else result


def allgather(tensor, name=None, process_set=0):
    """Concatenates every rank's tensor along the first dimension, in rank order.

    The first dimension may differ between ranks; the other dimensions must match.

    Args:
        tensor: a tensor of rank >= 1.
        name: optional op name.
        process_set: as for `allreduce`.

    Returns:
        A tensor whose first dimension is the sum over ranks.

    Example:

    >>> tfring.ops.allgather(tf.constant([[1, 2]]))
    <tf.Tensor: shape=(1, 2), dtype=int32, numpy=array([[1, 2]], dtype=int32)>
    """
    tensor = tf.convert_to_tensor(tensor)
    _check_dtypes("allgather", [tensor], _COPY_DTYPES)
    if tensor.shape.rank == 0:
        raise ValueError("tfring.allgather needs a tensor of rank >= 1 (it concatenates along the first "
                         "dimension), got a scalar")
    process_set = _set_id("allgather", process_set)
    lib = _ops()
    return ordering.ordered(lambda: lib.tfring_allgather(tensor, name=name, process_set=process_set))


def allgather_slices(slices, process_set=0, gather_values=None):
    """Every rank's rows of a `tf.IndexedSlices`: its values and their indices (as int64), each
    allgathered, in rank order. Summing the rows with equal indices gives the dense allreduce.

    Args:
        slices: a `tf.IndexedSlices`.
        process_set: as for `allreduce`.
        gather_values: the allgather of the values (default `allgather`; Horovod's API passes
            its own, whose gradient is Horovod's).

    Returns:
        `(values, indices)`.

    Example:

    >>> values, indices = tfring.ops.collectives.allgather_slices(embedding_gradient)
    """
    gather_values = gather_values or (lambda v: allgather(v, process_set=process_set))
    return gather_values(slices.values), allgather(tf.cast(slices.indices, tf.int64), process_set=process_set)


def reducescatter(tensors, op="sum", name=None, process_set=0):
    """Reduces tensors across all ranks and gives each rank its share of the rows.

    Of a first dimension of `R` rows over `P` ranks, rank `r` gets `R // P` rows, one more when
    `r < R % P`, in rank order (Horovod's split): the concatenation of every rank's result is the
    allreduce. A list is reduced as one fused collective. The ring moves half the bytes an
    allreduce moves.

    Args:
        tensors: a tensor of rank >= 1 or a list of them, the same shapes on every rank.
        op: "sum", "mean", "min", "max" or "product", as for `allreduce`.
        name: optional op name.
        process_set: as for `allreduce`.

    Returns:
        This rank's rows of the reduced tensor (or a list of them).

    Raises:
        ValueError: `op` is not one of the reduce ops, or a tensor is a scalar.
        TypeError: a dtype is not float16/bfloat16/float32/float64/int32/int64.
        tf.errors.FailedPreconditionError (at run time): ranks passed different shapes, counts or dtypes.
        tf.errors.UnavailableError (at run time): a rank died or stalled past the timeout.

    Example:

    >>> tfring.ops.reducescatter(tf.ones([4, 2]))   # on 2 ranks: 2 rows of 2.0 each
    """
    checks.choice("tfring.reducescatter", "op", op, REDUCE_OPS)
    process_set = _set_id("reducescatter", process_set)
    single, items = _as_list("reducescatter", tensors, _REDUCE_DTYPES)
    if not items:
        return []
    for i, t in enumerate(items):
        if t.shape.rank == 0:
            raise ValueError(f"tfring.reducescatter needs tensors of rank >= 1 (it splits the first dimension over "
                             f"the ranks), got a scalar at position {i}")
    result = _one_op_per_dtype(items, lambda lib, group: lib.tfring_reducescatter(group, reduce_op=op, name=name,
                                                                                      process_set=process_set))
    return result[0] if single else result


def alltoall(tensor, splits=None, name=None, process_set=0):
    """Sends rows of `tensor` to every rank and returns the rows every rank sent this one.

    The first `splits[0]` rows go to rank 0, the next `splits[1]` to rank 1, and so on; without
    `splits` the first dimension is cut evenly (it must then divide by the number of ranks).
    Ranks may send different numbers of rows, and none; the other dimensions must match. The
    blocks are relayed around the ring: a block crosses as many links as its destination is far
    to the right of its origin, so large all-to-alls over many ranks cost more than the bytes.

    Args:
        tensor: a tensor of rank >= 1.
        splits: optional list or 1-D integer tensor of one row count per rank, summing to the
            first dimension.
        name: optional op name.
        process_set: as for `allreduce`.

    Returns:
        A tuple `(received, received_splits)`: the rows from rank 0, then rank 1, ..., and how
        many rows came from each rank (an int64 vector).

    Raises:
        ValueError: a scalar.
        tf.errors.InvalidArgumentError: no `splits` and a first dimension that does not divide
            evenly; at run time, `splits` of the wrong length, with a negative count, or that do not
            add up to the first dimension.
        tf.errors.FailedPreconditionError (at run time): ranks passed rows of different shapes or dtypes.

    Example:

    >>> received, counts = tfring.ops.alltoall(tf.range(4), splits=[1, 3])   # on 2 ranks
    """
    tensor = tf.convert_to_tensor(tensor)
    _check_dtypes("alltoall", [tensor], _COPY_DTYPES)
    if tensor.shape.rank == 0:
        raise ValueError("tfring.alltoall needs a tensor of rank >= 1 (it sends rows), got a scalar")
    process_set = _set_id("alltoall", process_set)
    size = set_size(process_set)
    if splits is None:
        rows = tensor.shape[0]
        if rows is not None and rows % size:
            raise tf.errors.InvalidArgumentError(
                None, None, f"tfring.alltoall: without splits the first dimension ({rows}) must divide evenly by "
                            f"the number of ranks ({size})")
        splits = tf.fill([size], tf.shape(tensor, out_type=tf.int64)[0] // size)
    splits = tf.cast(tf.convert_to_tensor(splits), tf.int64)
    lib = _ops()
    received, counts = ordering.ordered(lambda: lib.tfring_alltoall(tensor, splits, name=name, process_set=process_set))
    return received, counts


def barrier(name=None, label="", process_set=0):
    """Returns once every rank has called it (in graph mode: an op to depend on).

    Args:
        name: optional op name.
        label: what the barrier is for; errors name it (also in eager mode, where ops have no
            names), e.g. when ranks reach different collectives.
        process_set: as for `allreduce`.

    Returns:
        None in eager mode; in graph mode, the op to depend on.

    Example:

    >>> tfring.ops.barrier(label="end of epoch")
    """
    process_set = _set_id("barrier", process_set)
    lib = _ops()
    return ordering.ordered(lambda: lib.tfring_barrier(label=label, name=name, process_set=process_set))


def join(name=None):
    """Says this rank is out of data, and waits until every rank has said so (Horovod's `join`).

    Until then this rank takes part in the other ranks' allreduces with zeros: their sums count
    only the ranks still running, and a mean still divides by the job's size (Horovod's rule).
    Any other collective that runs while a rank has joined (allgather, broadcast, reducescatter,
    alltoall, barrier, an allreduce with min/max/product or of GPU tensors) fails with
    `tf.errors.FailedPreconditionError` on the ranks that called it, naming the joined ranks; the
    joined ranks wait on. A joined rank waits for the others' next collective at most the
    collective timeout.

    Args:
        name: optional op name.

    Returns:
        The rank that joined last (an int32 scalar tensor; the same on every rank). Among ranks
        that joined at the same collective, the highest.

    Example:

    >>> for batch in my_rank_batches:   # ranks with fewer batches finish first
    ...     train_step(batch)
    >>> tfring.ops.join()
    """
    lib = _ops()
    return ordering.ordered(lambda: lib.tfring_join(name=name))


def broadcast_variables(variables, root_rank=0, process_set=0):
    """Assigns the root's values to `variables` on every rank (one fused collective per dtype).

    Args:
        variables: a list of `tf.Variable`s (or Keras variables).
        root_rank: the rank whose values win.
        process_set: as for `allreduce`.

    Returns:
        Eagerly: None (the values are assigned). In a graph: the op that broadcasts and assigns,
        as Horovod returns it. In a TF1 graph (`tf.compat.v1`, run by a `Session`) nothing is
        assigned until that op runs (`session.run(op)`); in a `tf.function` it runs by itself.

    Example:

    >>> v = tf.Variable([1.0])
    >>> tfring.ops.broadcast_variables([v])
    """
    variables = list(variables)
    if not variables:
        return tf.no_op()
    values = broadcast([tf.convert_to_tensor(v) for v in variables], root_rank=root_rank, process_set=process_set)
    return tf.group(*[v.assign(value) for v, value in zip(variables, values)])  # None eagerly
