"""Keras' gradient accumulation under RingStrategy: each rank sums its own micro-steps' gradients,
and the sum is all-reduced once, on the micro-step that applies it.

With `gradient_accumulation_steps=k`, Keras adds each micro-step's gradients into accumulator
variables and on every k-th micro-step applies (gradients + accumulated) / k, which its TensorFlow
optimizer all-reduces. Mirrored like batch-norm statistics (non-trainable floats assigned in a
step), the accumulators would be averaged across ranks at every micro-step: k gradient allreduces
where one does (PyTorch's `no_sync`, Horovod's `backward_passes_per_step`). So:

- accumulators are each rank's own (`is_accumulator`): sync-on-read with SUM aggregation, so a
  step reads and updates this rank's partial sum, and reading one outside a step (a checkpoint
  being saved) gives the sum over the ranks;
- each rank's gradients are of the mean loss over its own rows (`step_rows`): with accumulation on,
  the optimizer's door (`door`) weighs them by the rank's share of the micro-step's rows with
  `weighted_by_rows` (zeros from a rank with no rows, whose empty batch may give NaN) before Keras
  accumulates or applies them, and the step's gradient reduction then sums what it is given, so
  what a rank accumulated still counts on a micro-step where it holds no rows.

The applied gradient is the sum over ranks of (g_r + acc_r) / k, each micro-step's g_r weighed by
its share: the mean gradient of the global batches of the k micro-steps, what one process with the
same accumulation applies.
"""

import tensorflow as tf

from tfring.strategy import step_rows

_NAME = "gradient_accumulator"  # Keras' BaseOptimizer.build names them "<variable>_gradient_accumulator"


def is_accumulator(kwargs):
    """True for the variable-creation arguments of a Keras gradient accumulator.

    Args:
        kwargs: the keyword arguments a variable creator receives.

    Returns:
        bool.

    Example:

    >>> is_accumulator({"name": "dense_kernel_gradient_accumulator", "trainable": False})
    True
    """
    return not kwargs.get("trainable", True) and str(kwargs.get("name") or "").endswith(_NAME)


def weighted_by_rows(grads, positions):
    """`grads` at `positions` times this rank's share of the step's rows (zeros for a rank without
    rows), so that their sum over the ranks is the gradient of the global batch's mean loss.

    Args:
        grads: a list of gradients (tensors, `tf.IndexedSlices` or None), inside a RingStrategy step.
        positions: the positions of the gradients that travel.

    Returns:
        A list like `grads`.

    Example:

    >>> grads = weighted_by_rows(grads, [0, 1])   # in the optimizer's door
    """
    rows = step_rows.current()
    grads = list(grads)
    values = [grads[k].values if isinstance(grads[k], tf.IndexedSlices) else grads[k] for k in positions]
    # One decision for the whole list (a rank without rows zeroes them all).
    for k, v in zip(positions, rows.weighted(values)):
        g = grads[k]
        grads[k] = tf.IndexedSlices(v, g.indices, g.dense_shape) if isinstance(g, tf.IndexedSlices) else v
    return grads
