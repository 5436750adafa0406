"""Keras losses whose mean is not over rows: divided by the global batch's divisor, as in one process.

A Keras loss reduced with `"sum_over_batch_size"` (the default) or `"mean"` divides a rank's summed
loss by the elements it holds, and `step_rows` then scales it by the rank's share of the rows: the
global mean, since every rank's elements are its rows times the same per-row count. Two cases
divide by something else:

- a mask on the predictions (an `Embedding(mask_zero=True)` upstream, padded sequences): the mean
  is over the unmasked elements, and ranks hold different numbers of them;
- `reduction="mean_with_sample_weight"`: the mean is over the sum of the sample weights.

A rank with 3 real tokens would then weigh them as much as another rank's 300. For these, under a
RingStrategy step with more than one rank, the rank's summed loss is divided by the divisor summed
over the ranks (one scalar allreduce per such loss per step) and not scaled further: the ranks'
losses add up to the global batch's loss, and so do their gradients.
"""

import tensorflow as tf

from tfring.ops import collectives
from tfring.strategy import keras_patches
from tfring.strategy import step_rows

_MEANS = ("sum_over_batch_size", "mean")


def divides_by_rows(reduction, sample_weight, mask):
    """True when Keras' reduction divides by a count proportional to the rows (or by nothing).

    Args:
        reduction: a Keras loss reduction (`"sum_over_batch_size"`, `"mean"`,
            `"mean_with_sample_weight"`, `"sum"`, `"none"` or None).
        sample_weight: the sample weights, or None.
        mask: the predictions' mask, or None.

    Returns:
        bool.

    Example:

    >>> divides_by_rows("sum_over_batch_size", None, None)
    True
    >>> divides_by_rows("mean_with_sample_weight", weights, None)
    False
    """
    if reduction in _MEANS:
        return mask is None
    if reduction == "mean_with_sample_weight":
        return sample_weight is None and mask is None
    return True


def _divisor(values, sample_weight, mask, reduction, dtype):
    """What Keras divides this rank's summed loss by: the unmasked elements, or the weights' sum."""
    from keras.src.losses import loss as loss_module

    values = tf.convert_to_tensor(values, dtype=dtype)
    if reduction in _MEANS:
        return tf.reduce_sum(tf.cast(mask, values.dtype))
    weights = loss_module.apply_mask(None if sample_weight is None else tf.cast(sample_weight, values.dtype),
                                     None if mask is None else tf.convert_to_tensor(mask),
                                     dtype=values.dtype, reduction=reduction)
    _, weights = loss_module.squeeze_or_expand_to_same_rank(values, tf.cast(weights, values.dtype))
    return tf.reduce_sum(weights)


def _over_the_global_divisor(original):
    def wrapper(values, sample_weight=None, mask=None, reduction="sum_over_batch_size", dtype=None):
        from keras.src.losses import loss as loss_module

        reduction = loss_module.standardize_reduction(reduction)
        if step_rows.current() is None or divides_by_rows(reduction, sample_weight, mask):
            return original(values, sample_weight=sample_weight, mask=mask, reduction=reduction, dtype=dtype)
        summed = original(values, sample_weight=sample_weight, mask=mask, reduction="sum", dtype=dtype)
        local = _divisor(values, sample_weight, mask, reduction, dtype)
        total = collectives.allreduce(tf.cast(local, tf.float32), op="sum")
        return tf.math.divide_no_nan(summed, tf.cast(total, summed.dtype))

    return wrapper


PATCHES = [
    keras_patches.Patch("keras.src.losses.loss", "reduce_weighted_values", _over_the_global_divisor,
                        "a masked or sample-weighted mean divides by the global batch's divisor",
                        parameters=("values", "sample_weight", "mask", "reduction", "dtype")),
]

KERAS_INTERNALS = [
    keras_patches.Internal("keras.src.losses.loss", "standardize_reduction", ("reduction",),
                           "the reduction Keras will apply, as it names it"),
    keras_patches.Internal("keras.src.losses.loss", "apply_mask", ("sample_weight", "mask", "dtype", "reduction"),
                           "the weights Keras divides a sample-weighted mean by"),
    keras_patches.Internal("keras.src.losses.loss", "squeeze_or_expand_to_same_rank", ("x1", "x2"),
                           "those weights shaped as Keras shapes them"),
]
