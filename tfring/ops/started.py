"""Collectives started now and completed later: a start op that returns at once and a done op
that completes with the collective (the engine's tickets), so that several travel while the
tensors of later ones are still being computed. `Pending.wait()` adds the done op.

Each start op depends only on its tensors and the previous collective's start, which returns at
once, so every rank submits them in the same order (see `ordering`). Eagerly, each collective
runs at once. Gradient buckets use `allreduce_start`; a communication hook may also start an
allgather, an all-to-all or a reduce-scatter (`tfring.compression.GradientBucket`).
"""

import tensorflow as tf

from tfring import checks
from tfring.ops import collectives
from tfring.ops import ordering


def allreduce_buckets(buckets, op="sum", name=None, process_set=0):
    """All-reduces lists of tensors as one collective each, starting each as soon as its tensors exist.

    In a graph, each bucket is a start op that depends only on the bucket's own tensors (and on
    the previous bucket's start, which returns at once, so every rank submits them in the same
    order) and a done op that completes with the bucket's collective. The first buckets travel
    while the tensors of later ones are still being computed: give gradients in the order the
    backward pass produces them (last layer first). Eagerly, the buckets run one after another.

    Args:
        buckets: a list of lists of tensors; a bucket of several dtypes runs as one collective per dtype.
        op: as for `allreduce`.
        name: optional op name prefix.
        process_set: as for `allreduce`.

    Returns:
        A list of lists of reduced tensors, shaped like `buckets`; identical on every rank.

    Raises:
        ValueError, TypeError, tf.errors.OpError: as `allreduce`.

    Example:

    >>> grads = [tf.ones([2]), tf.ones([3])]
    >>> tfring.ops.allreduce_buckets([grads[1:], grads[:1]], op="mean")
    """
    started = [allreduce_start(b, op=op, name=name, process_set=process_set) for b in buckets]
    return [pending.wait() for pending in started]


class Pending:
    """An allreduce started by `allreduce_start`; `wait()` gives its result.

    Args:
        wait: a function of no arguments returning the reduced tensors (called once).

    Example:

    >>> pending = allreduce_start([tf.ones([2])])
    >>> pending.wait()
    [<tf.Tensor: shape=(2,), dtype=float32, numpy=array([2., 2.], dtype=float32)>]
    """

    def __init__(self, wait):
        self._wait = wait
        self._result = None

    def wait(self):
        """The reduced tensors, a list shaped like the started one; identical on every rank."""
        if self._result is None:
            self._result = self._wait()
        return self._result


def allreduce_start(tensors, op="sum", name=None, process_set=0):
    """Starts all-reducing a list of tensors as one collective (one per dtype) and returns at once.

    In a graph the start op depends only on `tensors` and the previous collective's start, and
    `wait()` adds the op that completes it: start several, then wait for each, and the later ones
    travel while the tensors of others are still being computed (`allreduce_buckets` does that).
    Eagerly, the collective runs at once.

    Args:
        tensors: a list of tensors.
        op: as for `allreduce`.
        name: optional op name prefix.
        process_set: as for `allreduce`.

    Returns:
        A `Pending`: its `wait()` returns the reduced tensors.

    Raises:
        ValueError, TypeError, tf.errors.OpError: as `allreduce`.

    Example:

    >>> first, second = allreduce_start([g1, g2]), allreduce_start([g3])
    >>> first.wait() + second.wait()
    """
    checks.choice("tfring.allreduce_start", "op", op, collectives.ALLREDUCE_OPS)
    process_set = collectives._set_id("allreduce_start", process_set)
    _, bucket = collectives._as_list("allreduce_start", list(tensors), collectives._REDUCE_DTYPES)
    if tf.executing_eagerly() or not bucket:
        reduced = collectives.allreduce(bucket, op=op, name=name, process_set=process_set) if bucket else []
        return Pending(lambda: reduced)
    return _one_start_per_dtype(bucket, lambda lib, group: lib.tfring_allreduce_start(
        group, reduce_op=op, name=name, process_set=process_set))


def reduce_to_owners_start(tensors, owners, op="sum", process_set=0):
    """Starts reducing a list so that each tensor arrives, reduced whole, on one rank only (its
    owner), and returns at once: one collective per dtype, each a reduce-scatter whose blocks are
    the owners' tensors.

    What a sharded optimizer needs of its gradients (each rank updates the variables it owns):
    every rank sends each gradient once and receives only its own, about half the bytes of an
    allreduce. On 2 ranks each owner's results equal the allreduce's bit for bit; on more, they may
    differ in the last bits (the ranks add in another order).

    Args:
        tensors: a list of tensors, the same shapes on every rank.
        owners: one rank per tensor (its position in `process_set`), the same list on every rank.
        op: "sum", "mean", "min", "max" or "product".
        process_set: as for `allreduce`.

    Returns:
        A `Pending`: its `wait()` returns a list like `tensors`, the reduced tensor where this rank
        is the owner and None elsewhere.

    Raises:
        ValueError: `owners` does not give one rank of the set per tensor.

    Example:

    >>> reduce_to_owners_start([g1, g2], owners=[0, 1]).wait()   # rank 0: [sum of g1, None]
    """
    checks.choice("tfring.reduce_to_owners_start", "op", op, collectives.REDUCE_OPS)
    process_set = collectives._set_id("reduce_to_owners_start", process_set)
    items = [tf.convert_to_tensor(t) for t in tensors]
    owners = [int(o) for o in owners]
    size = collectives.set_size(process_set)
    if len(owners) != len(items) or any(not 0 <= o < size for o in owners):
        raise ValueError(f"tfring.reduce_to_owners_start: owners must give one rank in [0, {size}) for each of "
                         f"the {len(items)} tensors, got {owners}")
    if not items:
        return Pending(lambda: [])
    collectives._check_dtypes("reduce_to_owners_start", items, collectives._REDUCE_DTYPES)
    me = collectives.position("reduce_to_owners_start", process_set)
    lib = collectives._ops()
    started = []  # (positions in items, this rank's positions among them, buffers, ticket)
    for idx in collectives._dtype_groups(items):
        group_owners = [owners[i] for i in idx]
        owned = [k for k, o in enumerate(group_owners) if o == me]
        ticket, buffers = ordering.ordered(lambda idx=idx, group_owners=group_owners, owned=owned: _ticket_first(
            lib.tfring_reduce_to_owners_start([items[i] for i in idx], M=len(owned), owners=group_owners,
                                              owned=owned, reduce_op=op, process_set=process_set)))
        started.append((idx, owned, buffers, ticket))

    def done():
        out = [None] * len(items)
        for idx, owned, buffers, ticket in started:
            if not owned:  # nothing of this group comes here: wait for its collective all the same
                lib.tfring_collective_done([tf.zeros([0], items[idx[0]].dtype)], ticket)
                continue
            for k, r in zip(owned, collectives.relayed(lib, lib.tfring_collective_done(buffers, ticket))):
                out[idx[k]] = r
        return out

    return Pending(done)


def _one_start_per_dtype(items, start):
    """`start(lib, group)` (a start op: buffers, ticket) for each dtype group of `items`, each the
    next link of the chain; a `Pending` of the results in the order of `items`."""
    lib = collectives._ops()
    started = []  # (positions in items, buffers, ticket)
    for idx in collectives._dtype_groups(items):
        ticket, buffers = ordering.ordered(lambda idx=idx: _ticket_first(start(lib, [items[i] for i in idx])))
        started.append((idx, buffers, ticket))

    def done():
        out = [None] * len(items)
        for idx, buffers, ticket in started:
            for i, r in zip(idx, collectives.relayed(lib, lib.tfring_collective_done(buffers, ticket))):
                out[i] = r
        return out

    return Pending(done)


def _ticket_first(started):
    # The ticket first: `ordered` makes the op of the first output the chain's last link.
    buffers, ticket = started
    return [ticket, buffers]


def _start_one(what, tensor, make, process_set):
    """Starts `make(lib, tensor)` (a start op: result, ticket) as the next link of the chain; a
    `Pending` of its result, through the done op."""
    tensor = tf.convert_to_tensor(tensor)
    collectives._check_dtypes(what, [tensor], collectives._COPY_DTYPES)
    if tensor.shape.rank == 0:
        raise ValueError(f"tfring.{what} needs a tensor of rank >= 1, got a scalar")
    lib = collectives._ops()
    ticket, buffer = ordering.ordered(lambda: _ticket_first(make(lib, tensor)))
    return Pending(lambda: [lib.tfring_collective_done([buffer], ticket)[0]])


def allgather_start(tensor, process_set=0):
    """Starts an allgather in which every rank sends as many rows, and returns at once.

    Args:
        tensor: a tensor of rank >= 1, of the same shape on every rank.
        process_set: as for `allreduce`.

    Returns:
        A `Pending`: its `wait()` returns a one-tensor list, every rank's rows in rank order.

    Raises:
        tf.errors.InvalidArgumentError (at run time): ranks sent different row counts.

    Example:

    >>> allgather_start(tf.ones([2, 3])).wait()[0].shape   # on 2 ranks
    TensorShape([4, 3])
    """
    process_set = collectives._set_id("allgather_start", process_set)
    if tf.executing_eagerly():
        return Pending(lambda gathered=collectives.allgather(tensor, process_set=process_set): [gathered])
    size = collectives.set_size(process_set)
    pending = _start_one("allgather_start", tensor, lambda lib, t: lib.tfring_allgather_start(
        t, process_set=process_set), process_set)
    rows = tensor.shape[0]
    shape = tf.TensorShape([None if rows is None else rows * size]).concatenate(tensor.shape[1:])
    return Pending(lambda: [tf.ensure_shape(pending.wait()[0], shape)])


def alltoall_start(tensor, process_set=0):
    """Starts an all-to-all of equal blocks: block d of `tensor`'s rows goes to rank d.

    Args:
        tensor: a tensor of rank >= 1 whose first dimension divides by the number of ranks.
        process_set: as for `allreduce`.

    Returns:
        A `Pending`: its `wait()` returns a one-tensor list shaped like `tensor`, the blocks every
        rank sent this one, in rank order.

    Example:

    >>> alltoall_start(tf.range(4)).wait()   # on 2 ranks: rank 0 gets [0, 1, 0, 1]
    """
    process_set = collectives._set_id("alltoall_start", process_set)
    if tf.executing_eagerly():
        return Pending(lambda received=collectives.alltoall(tensor, process_set=process_set)[0]: [received])
    pending = _start_one("alltoall_start", tensor, lambda lib, t: lib.tfring_alltoall_start(
        t, process_set=process_set), process_set)
    return Pending(lambda: [tf.ensure_shape(pending.wait()[0], tensor.shape)])


def reducescatter_start(tensors, op="sum", process_set=0):
    """Starts the reduce-scatter of a list (one collective per dtype) and returns at once.

    Args:
        tensors: a list of tensors of rank >= 1.
        op: as for `reducescatter`.
        process_set: as for `allreduce`.

    Returns:
        A `Pending`: its `wait()` returns this rank's rows of each reduced tensor.

    Example:

    >>> reducescatter_start([tf.ones([4, 2])]).wait()   # on 2 ranks: 2 rows of 2.0 each
    """
    checks.choice("tfring.reducescatter_start", "op", op, collectives.REDUCE_OPS)
    process_set = collectives._set_id("reducescatter_start", process_set)
    items = [tf.convert_to_tensor(t) for t in tensors]
    if tf.executing_eagerly() or not items:
        return Pending(lambda out=collectives.reducescatter(items, op=op, process_set=process_set) if items else []:
                       list(out))
    collectives._check_dtypes("reducescatter_start", items, collectives._REDUCE_DTYPES)
    return _one_start_per_dtype(items, lambda lib, group: lib.tfring_reducescatter_start(
        group, reduce_op=op, process_set=process_set))
