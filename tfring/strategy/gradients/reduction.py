"""A step's gradients summed over the ranks: dense ones in buckets through the communication hook,
sparse ones as rows.

`RingExtended` calls `reduce_gradients` where gradients meet the strategy: at the optimizer's door
(`door`), or from Keras' own gradient all-reduce where the door leaves it to Keras (gradient
accumulation, custom loops).
"""

import dataclasses

import tensorflow as tf

from tfring.compression import adasum
from tfring.compression import default_hooks
from tfring.compression import runner
from tfring.ops import started
from tfring.strategy.gradients import buckets as buckets_lib
from tfring.strategy.gradients import sparse


@dataclasses.dataclass
class GradientSettings:
    """How this strategy's gradients travel; every rank must hold the same settings.

    Args:
        size: the number of ranks.
        bucket_bytes: about how many bytes travel together (0: one bucket; read at each trace:
            `bucket_tuning` changes it).
        sparse_as_dense: densify sparse gradients (see `sparse`).
        hook: the communication hook of dense buckets (see `tfring.compression`).
        hook_state: its state.
        process_set: the tfring process set the gradients are reduced over (0: every rank;
            `tfring.ops.add_process_set`); `size` is its size.

    Example:

    >>> GradientSettings(size=2, bucket_bytes=4 << 20)
    """

    size: int
    bucket_bytes: int = 0
    sparse_as_dense: bool = False
    hook: object = default_hooks.allreduce_hook
    hook_state: object = None
    process_set: int = 0
    traced: bool = False  # a step has reduced gradients with these settings (the hook is in its graph)

    @property
    def exact(self):
        """Whether gradients travel as they are (the default hook)."""
        return self.hook is default_hooks.allreduce_hook


def reduce_gradients(settings, grads, op="sum", rows=None, as_rows=False, by_rows=False, variables=None):
    """Sums (or averages) this rank's gradients over the ranks.

    Args:
        settings: a `GradientSettings`.
        grads: a list of gradients: tensors, `tf.IndexedSlices` or None (left as they are), in the
            order of their variables.
        op: "sum" or "mean".
        rows: the step's `StepRows`, whose `zero_if_empty` replaces a rank's gradients by zeros
            when it holds no rows (one decision per bucket); None: leave them as they are.
        as_rows: sparse gradients travel as rows, never densified (they are clipped next).
        by_rows: with `op="mean"` and `rows`, the mean weighs each rank by its rows (each rank's
            gradients are of the mean loss over its own rows: `step_rows`).
        variables: the variable of each gradient (a list like `grads`), handed to the hook as
            `bucket.variables`; None where unknown.

    Returns:
        A list like `grads`, reduced; identical on every rank.

    Raises:
        NotImplementedError: sparse gradients with a hook that combines by Adasum.

    Example:

    >>> reduce_gradients(settings, [kernel_grad, None, embedding_grad], rows=step_rows.current())
    """
    settings.traced = True
    if by_rows and (op != "mean" or rows is None):
        raise ValueError(f"a reduction by rows is a mean over the step's rows; got op={op!r}, rows={rows}")
    by_adasum = adasum.combines(settings.hook, settings.hook_state)
    if by_adasum and settings.sparse_as_dense and not as_rows:  # densified first, to be combined too
        grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
    reduced = list(grads)
    dense = [k for k, g in enumerate(grads) if g is not None and not isinstance(g, tf.IndexedSlices)]
    slices = [k for k, g in enumerate(grads) if isinstance(g, tf.IndexedSlices)]
    if dense:
        owners = [variables[k] for k in dense] if variables is not None else [None] * len(dense)
        for k, r in zip(dense, _reduce_dense(settings, [grads[k] for k in dense], op, rows, by_rows, owners)):
            reduced[k] = r
    if slices and by_adasum:
        raise NotImplementedError("tfring: Adasum combines dense gradients only, and this step has sparse ones "
                                  "(tf.IndexedSlices, e.g. an Embedding's): pass sparse_as_dense=True so that they "
                                  "travel dense, or do without Adasum")
    if slices:
        given = [grads[k] for k in slices]
        if by_rows:  # one decision for every sparse gradient of the step
            given = [tf.IndexedSlices(v, s.indices, s.dense_shape)
                     for v, s in zip(rows.for_mean([s.values for s in given]), given)]
        out = sparse.reduce_slices(given, settings.size, settings.sparse_as_dense,
                                   mean=op == "mean", as_rows=as_rows, process_set=settings.process_set)
        for k, r in zip(slices, out):
            reduced[k] = r
    return reduced


def _reduce_dense(settings, values, op, rows, by_rows, variables):
    values = [tf.convert_to_tensor(v) for v in values]
    order = buckets_lib.plan(values, 0 if tf.executing_eagerly() else settings.bucket_bytes)
    buckets = [[values[i] for i in idx] for idx in order]
    if rows is not None:
        # One decision per bucket, so that each bucket waits only for its own gradients.
        buckets = [rows.for_mean(b) if by_rows else rows.zero_if_empty(b) for b in buckets]
    reduced = [None] * len(values)
    travelled = runner.run(settings.hook, settings.hook_state, buckets, op, overlap=len(buckets) > 1,
                           process_set=settings.process_set, size=settings.size,
                           variables=[[variables[i] for i in idx] for idx in order])
    for idx, rs in zip(order, travelled):
        for i, r in zip(idx, rs):
            reduced[i] = r
    return reduced


def reduce_to_owners(settings, grads, owners, op="sum", rows=None, by_rows=False, as_rows=False, variables=None):
    """Sums (or averages) gradients over the ranks so that each dense one arrives on its owner alone
    (sharded gradients: `RingStrategy(shard_gradients=True)`), in buckets that start as the
    backward pass produces them. Sparse ones (`tf.IndexedSlices`) cannot be cut by owner: they
    reach every rank, as `reduce_gradients` gives them.

    Args:
        settings: a `GradientSettings`; its hook must be the exact default (a hook returns whole
            gradients on every rank).
        grads: a list of gradients: tensors, `tf.IndexedSlices` or None (left as they are).
        owners: the owner of each gradient (its rank in the settings' process set), like `grads`.
        op: "sum" or "mean".
        rows: as for `reduce_gradients`.
        by_rows: as for `reduce_gradients`.
        as_rows: as for `reduce_gradients` (sparse gradients only).
        variables: as for `reduce_gradients` (sparse gradients only).

    Returns:
        A list like `grads`: a dense gradient reduced where this rank owns it and None elsewhere,
        with the values `reduce_gradients` gives the owner; a sparse one reduced on every rank.

    Raises:
        ValueError: a communication hook or compression is set.

    Example:

    >>> reduce_to_owners(settings, [kernel_grad, bias_grad], owners=[0, 1], op="mean")  # rank 0: [sum / 2, None]
    """
    settings.traced = True
    if not settings.exact:
        raise ValueError(f"tfring: shard_gradients=True reduces each gradient to its owner only, which a "
                         f"communication hook or compression cannot do (they return whole gradients): "
                         f"{runner.hook_name(settings.hook)} is set; drop it or set shard_gradients=False")
    reduced = [None] * len(grads)
    sparse = [k for k, g in enumerate(grads) if isinstance(g, tf.IndexedSlices)]
    if sparse:
        for k, r in zip(sparse, reduce_gradients(settings, [grads[k] for k in sparse], op=op, rows=rows,
                                                 as_rows=as_rows, by_rows=by_rows,
                                                 variables=[variables[k] for k in sparse] if variables else None)):
            reduced[k] = r
    dense = [k for k, g in enumerate(grads) if g is not None and not isinstance(g, tf.IndexedSlices)]
    values = [tf.convert_to_tensor(grads[k]) for k in dense]
    order = buckets_lib.plan_by_owners(values, [owners[k] for k in dense],
                                       0 if tf.executing_eagerly() else settings.bucket_bytes, settings.size)
    pending = []
    for idx in order:
        bucket = [values[i] for i in idx]
        if rows is not None:
            bucket = rows.for_mean(bucket) if by_rows else rows.zero_if_empty(bucket)
        pending.append((idx, started.reduce_to_owners_start(bucket, [owners[dense[i]] for i in idx], op=op,
                                                            process_set=settings.process_set)))
    for idx, one in pending:
        for i, r in zip(idx, one.wait()):
            reduced[dense[i]] = r
    return reduced
