"""Adasum as a communication hook: the ranks' gradients combined adaptively instead of averaged."""

import tensorflow as tf


def adasum_hook(state, bucket):
    """The Adasum of the ranks' gradients (Maleki et al. 2021; Horovod's `op=hvd.Adasum`).

    Each gradient tensor combines pairwise over the ranks, in recursive-doubling order, as
    `(1 - a·b/2|a|²) a + (1 - a·b/2|b|²) b`: orthogonal gradients add up, parallel ones are
    averaged, so that the step grows with what the ranks learned differently. What
    `RingStrategy(compression="adasum")` registers. Not equal to one process (nor meant to be):
    with parallel gradients it is the mean, with orthogonal ones up to the number of ranks times
    it. The number of ranks must be a power of two, the gradients floating.

    Every rank's gradients enter as each rank's own (the gradient of the mean loss over its own
    rows): a bucket whose op is "sum" (gradients weighed so that their sum is the job's) is
    scaled back by the number of ranks after the combination (Adasum is linear in a common scale).

    Args:
        state: unused.
        bucket: a `GradientBucket`.

    Returns:
        A `Future` of the combined gradients, identical on every rank.

    Example:

    >>> strategy.register_comm_hook(None, tfring.compression.adasum_hook)   # = compression="adasum"
    """
    del state
    return combined(bucket, bucket.gradients)


def combined(bucket, tensors):
    """Starts the Adasum of `tensors` (shaped like the bucket's gradients) over the bucket's ranks.

    The one rule for how a bucket's op meets Adasum (see `adasum_hook`), also used by Horovod's
    `op=hvd.Adasum` after its compression.

    Args:
        bucket: a `GradientBucket`.
        tensors: what this rank sends, floating tensors.

    Returns:
        A `Future` of the combined tensors.

    Example:

    >>> combined(bucket, [tf.cast(g, tf.float16) for g in bucket.gradients])
    """
    future = bucket.allreduce(list(tensors), "adasum")
    if bucket.op != "sum" or bucket.size == 1:
        return future
    return future.then(lambda reduced: [r * tf.cast(bucket.size, r.dtype) for r in reduced])


def combines(hook, state):
    """Whether gradients reduced through `hook` (with `state`) are combined by Adasum: this module's
    hook, or a hook whose state says so (Horovod's `op=hvd.Adasum`).

    Args:
        hook: a communication hook.
        state: its state.

    Returns:
        A bool.

    Example:

    >>> combines(adasum_hook, None)
    True
    """
    return hook is adasum_hook or getattr(state, "adasum", False) is True
