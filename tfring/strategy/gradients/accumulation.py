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
- a rank with no rows in a micro-step adds zeros (gradients of an empty batch may be NaN): with
  accumulation on, the optimizer's door (`door`) zeroes them with `zero_where_no_rows` (one
  decision for the whole list) before Keras accumulates or applies them, and the step's gradient
  reduction then leaves what it is given alone, so what a rank accumulated still counts on a
  micro-step where it holds no rows.

The applied gradient is the sum over ranks of (g_r + acc_r) / k: the mean gradient of the global
batches of the k micro-steps, what one process with the same accumulation applies.
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


def zero_where_no_rows(grads, positions):
    """`grads` unchanged, or zeros (the dense ones at `positions`) when this rank holds no rows in
    the step.

    Args:
        grads: a list of gradients (tensors, `tf.IndexedSlices` or None), inside a RingStrategy step.
        positions: the positions of the gradients that travel.

    Returns:
        A list like `grads`.

    Example:

    >>> grads = zero_where_no_rows(grads, [0, 1])   # in the optimizer's door
    """
    dense = [k for k in positions if not isinstance(grads[k], tf.IndexedSlices)]
    grads = list(grads)
    if dense:
        for k, g in zip(dense, step_rows.current().zero_if_empty([grads[k] for k in dense])):
            grads[k] = g
    return grads
