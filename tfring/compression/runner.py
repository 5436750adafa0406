"""Hands each bucket to the hook, then checks and collects what comes back."""

import tensorflow as tf

from tfring.compression import bucket as bucket_lib
from tfring.compression import hook_state


def run(hook, state, buckets, op, overlap, process_set=0, size=1, variables=None):
    """Hands each bucket to `hook`, then waits for every future, checking what comes back.

    Args:
        hook: a communication hook.
        state: its state (a `CommHookState` is advanced by one step after the buckets).
        buckets: a list of lists of dense tensors, in the order they travel.
        op: "sum" or "mean".
        overlap: whether the buckets' collectives overlap the step (see `GradientBucket`).
        process_set: the tfring process set the buckets travel over (0: every rank).
        size: the number of ranks in it.
        variables: a list of lists shaped like `buckets`: each gradient's variable (or None).

    Returns:
        A list of lists of reduced tensors, shaped like `buckets`.

    Raises:
        TypeError: the hook returned something other than a `Future`, or tensors of other
            shapes, dtypes or count than the bucket's gradients.

    Example:

    >>> run(default_hooks.allreduce_hook, None, [[g1, g2], [g3]], "mean", overlap=True, size=2)
    """
    variables = variables or [None] * len(buckets)
    futures = []
    for k, (gradients, owners) in enumerate(zip(buckets, variables)):
        bucket = bucket_lib.GradientBucket(k, list(gradients), None if owners is None else list(owners), op,
                                           k == len(buckets) - 1, overlap, process_set, size)
        future = hook(state, bucket)
        if not isinstance(future, bucket_lib.Future):
            raise TypeError(f"tfring: the communication hook {hook_name(hook)} returned {type(future).__name__}, "
                            f"not a Future (return bucket.allreduce(...), or a .then() of it)")
        futures.append((bucket, future))
    reduced = [_checked(hook, bucket, future.wait()) for bucket, future in futures]
    if isinstance(state, hook_state.CommHookState) and reduced:
        advanced = state.advance([r for rs in reduced for r in rs])
        reduced = _after(advanced, reduced)
    return reduced


def _after(op, reduced):
    """`reduced`, each tensor after `op` (so the step's update waits for the counter)."""
    if tf.executing_eagerly():
        return reduced
    with tf.control_dependencies([op]):
        return [[tf.identity(r) for r in rs] for rs in reduced]


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
    """A hook's name for messages: its qualified name, or its class's."""
    return getattr(hook, "__qualname__", None) or type(hook).__qualname__
