"""How a bucket of gradients travels between the ranks: communication hooks.

After the gradients enter the optimizer (see `door`), `RingStrategy` cuts the dense ones into
buckets (see `buckets`) and hands each bucket to its communication hook, as PyTorch DDP's
`register_comm_hook(state, hook)` does. `allreduce_hook` (the default: exact, as `bucket.op` asks) and
`cast_hook` (`compression="fp16"`/`"bf16"`) are the first two; gradient compression with error
feedback or a sharded optimizer's reduce-scatter are new hooks, with no change to the Keras glue.

The contract:

- A hook is a function `hook(state, bucket) -> Future`. It is called while the train step is
  traced (once per trace, not once per step), in graph mode or eagerly, for every bucket in order;
  every hook call of a step happens before any `Future.wait()`, so a hook must start its
  collectives and return, not wait for them.
- `bucket` is a `GradientBucket`: `bucket.gradients` (this rank's dense gradients in the bucket,
  each shaped and typed like its variable), `bucket.index` (0 for the first bucket of the step,
  the same on every rank), `bucket.is_last` and `bucket.op`: "mean" for the gradients entering an
  optimizer (each rank's are of the mean loss over its own rows, weighed already when the ranks
  hold different numbers of rows: the job's gradient is their mean, as PyTorch DDP's hooks
  return), "sum" where they are summed (gradient accumulation's weighed sum, Horovod's `op=Sum`).
  Only gradients reach a hook: synchronized batch norm's sums, a step's own `all_reduce`, metrics
  and `strategy.reduce` never do (they stay exact). Start collectives with
  `bucket.allreduce(tensors, op)` (default: `bucket.op`), which returns a `Future`;
  `Future.then(fn)` transforms its result once it is there.
- The `Future` must give a list of tensors shaped and typed like `bucket.gradients`: the reduced
  gradients, reduced as `bucket.op` says. **Every rank must end with identical bits** (the ranks' weights would drift apart
  otherwise): reduce what travels with collectives only, never mix in a rank's own values after.
- Every rank must start the same collectives in the same order (ranks pass the same hook and
  state).
- `state` is whatever was registered with the hook; the hook may keep things in it (for error
  feedback, one residual `tf.Variable` per `bucket.index`, created on the first trace under
  `strategy.scope()`). Sparse gradients (`tf.IndexedSlices`) do not pass through hooks: their
  rows travel as they are (see `sparse`).
- A hook other than `allreduce_hook` is taken to be approximate: under a `LossScaleOptimizer` it is
  handed unscaled gradients (the scale comes off before and back after, exactly), so a narrow
  wire type does not overflow where one process would not.

Example:

>>> def halves(state, bucket):            # an exact hook: the ranks' halves reduced, then doubled
...     sent = [g / 2 for g in bucket.gradients]
...     return bucket.allreduce(sent, bucket.op).then(lambda reduced: [r * 2 for r in reduced])
>>> strategy.register_comm_hook(None, halves)
"""

import dataclasses

import tensorflow as tf

from tfring.ops import collectives


class Future(collectives.Pending):
    """The result of a hook's collectives, available once the step has started them all: a
    `tfring.ops` `Pending` (its `wait()` gives the list of tensors, computed once) with `then`.

    Args:
        wait: a function of no arguments returning a list of tensors (called at most once).

    Example:

    >>> future = bucket.allreduce(bucket.gradients)
    >>> future.then(lambda reduced: [r / 2 for r in reduced]).wait()
    """

    def then(self, fn):
        """A future of `fn(result)`.

        Args:
            fn: a function from this future's list of tensors to another list of tensors.

        Returns:
            A `Future`.
        """
        return Future(lambda: fn(self.wait()))


@dataclasses.dataclass
class GradientBucket:
    """One bucket of a step's dense gradients, as a communication hook receives it.

    Args:
        index: the bucket's position among the step's buckets (the same on every rank).
        gradients: this rank's gradients in the bucket, a list of dense tensors.
        op: the reduction asked for: "mean" (the gradients entering an optimizer) or "sum".
        is_last: whether this is the step's last bucket.
        overlap: start collectives so that they overlap the rest of the step (several buckets in
            a graph); otherwise each is one op.
        process_set: the tfring process set `allreduce` runs over (0: every rank).

    Example:

    >>> bucket.allreduce(bucket.gradients, bucket.op).wait()
    """

    index: int
    gradients: list
    op: str = "sum"
    is_last: bool = True
    overlap: bool = False
    process_set: int = 0

    def allreduce(self, tensors, op=None):
        """Starts all-reducing `tensors` (one fused collective per dtype).

        Args:
            tensors: a list of tensors.
            op: "sum", "mean", "min", "max" or "product"; default: the bucket's `op`.

        Returns:
            A `Future` of the reduced tensors, identical on every rank.
        """
        op = op or self.op
        if self.overlap:
            return Future(collectives.allreduce_start(tensors, op=op, process_set=self.process_set).wait)
        reduced = collectives.allreduce(list(tensors), op=op, process_set=self.process_set)
        return Future(lambda: reduced)


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

    def send(g):
        return tf.cast(g, wire) if g.dtype.is_floating and g.dtype != wire else g

    return bucket.allreduce([send(g) for g in grads]).then(
        lambda reduced: [tf.cast(r, g.dtype) if r.dtype != g.dtype else r for r, g in zip(reduced, grads)])


COMPRESSION = {None: None, "none": None, "fp16": tf.float16, "bf16": tf.bfloat16}


def for_compression(compression):
    """The hook and state `RingStrategy(compression=...)` registers.

    Args:
        compression: None, "none", "fp16" or "bf16".

    Returns:
        `(state, hook)`.

    Example:

    >>> for_compression("fp16")
    (tf.float16, cast_hook)
    """
    wire = COMPRESSION[compression]
    return (None, allreduce_hook) if wire is None else (wire, cast_hook)


def run(hook, state, buckets, op, overlap, process_set=0):
    """Hands each bucket to `hook`, then waits for every future, checking what comes back.

    Args:
        hook: a communication hook.
        state: its state.
        buckets: a list of lists of dense tensors, in the order they travel.
        op: "sum" or "mean".
        overlap: whether the buckets' collectives overlap the step (see `GradientBucket`).
        process_set: the tfring process set the buckets travel over (0: every rank).

    Returns:
        A list of lists of reduced tensors, shaped like `buckets`.

    Raises:
        TypeError: the hook returned something other than a `Future`, or tensors of other
            shapes, dtypes or count than the bucket's gradients.
    """
    futures = []
    for k, gradients in enumerate(buckets):
        bucket = GradientBucket(k, list(gradients), op, k == len(buckets) - 1, overlap, process_set)
        future = hook(state, bucket)
        if not isinstance(future, Future):
            raise TypeError(f"tfring: the communication hook {hook_name(hook)} returned {type(future).__name__}, "
                            f"not a Future (return bucket.allreduce(...), or a .then() of it)")
        futures.append((bucket, future))
    return [_checked(hook, bucket, future.wait()) for bucket, future in futures]


def _checked(hook, bucket, reduced):
    expected = [(g.dtype, g.shape) for g in bucket.gradients]
    reduced = [tf.convert_to_tensor(r) for r in reduced]
    got = [(r.dtype, r.shape) for r in reduced]
    if len(got) != len(expected) or any(d1 != d2 or not s1.is_compatible_with(s2)
                                        for (d1, s1), (d2, s2) in zip(got, expected)):
        raise TypeError(f"tfring: the communication hook {hook_name(hook)} returned tensors {got} for bucket "
                        f"{bucket.index}, whose gradients are {expected}: a hook returns one tensor per "
                        f"gradient, of its shape and dtype")
    return reduced


def hook_name(hook):
    return getattr(hook, "__qualname__", None) or repr(hook)
