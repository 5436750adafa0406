"""Keras losses whose one-process value is not a mean over rows, expressed per rank.

The rule (`step_rows`): a rank's loss is what one process computes on that rank's rows, and the
job averages the ranks' gradients weighted by their rows. A Keras loss reduced with
`"sum_over_batch_size"` (the default) or `"mean"` is that already: a rank's mean over its rows.
Three cases are not, and for them, under a RingStrategy step with more than one rank, the rank's
loss is its part of the global batch's loss divided by its share of the rows, so that the same
weighted mean gives the global batch's loss (and its gradient):

- a mask on the predictions (an `Embedding(mask_zero=True)` upstream, padded sequences): the mean
  is over the unmasked elements, and ranks hold different numbers of them; a rank with 3 real
  tokens would otherwise weigh them as much as another rank's 300. The rank's summed loss is
  divided by the unmasked elements summed over the ranks (one scalar allreduce per such loss per
  step);
- `reduction="mean_with_sample_weight"`: the same with the sum of the sample weights;
- `reduction="sum"`: one process's loss is the sum over the global batch.

`tf.nn.compute_average_loss(per_example, global_batch_size=B)` and `tf.nn.scale_regularization_loss`
(the tf.distribute idiom) return each rank's share of the global loss, which a custom loop sums
over the ranks (`strategy.reduce("SUM", ...)`): their values stay so, and their gradients are
those of the rank's own loss, so that the door's weighted mean trains as one process.
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


def _as_the_global_batch(original):
    def wrapper(values, sample_weight=None, mask=None, reduction="sum_over_batch_size", dtype=None):
        from keras.src.losses import loss as loss_module

        reduction = loss_module.standardize_reduction(reduction)
        rows = step_rows.current()
        if rows is None or (reduction != "sum" and divides_by_rows(reduction, sample_weight, mask)):
            return original(values, sample_weight=sample_weight, mask=mask, reduction=reduction, dtype=dtype)
        summed = original(values, sample_weight=sample_weight, mask=mask, reduction="sum", dtype=dtype)
        if reduction != "sum":
            local = _divisor(values, sample_weight, mask, reduction, dtype)
            total = collectives.allreduce(tf.cast(local, tf.float32), op="sum")
            summed = tf.math.divide_no_nan(summed, tf.cast(total, summed.dtype))
        return summed * rows.inverse_share(summed.dtype)

    return wrapper


def _average_loss_of_the_global_batch(original):
    def compute_average_loss(per_example_loss, sample_weight=None, global_batch_size=None):
        rows = step_rows.current()
        loss = original(per_example_loss, sample_weight=sample_weight, global_batch_size=global_batch_size)
        if rows is None:
            return loss
        # Its value stays tf.distribute's (each rank's share: summed over the ranks, the global
        # loss); its gradient is the rank's own loss's, which the door averages by rows.
        factor = rows.inverse_share(loss.dtype) if global_batch_size is not None else float(rows.size)
        return _with_gradient_times(loss, factor)

    return compute_average_loss


def _per_replica_regularization(original):
    def scale_regularization_loss(regularization_loss):
        loss = original(regularization_loss)
        rows = step_rows.current()
        return loss if rows is None else _with_gradient_times(loss, float(rows.size))

    return scale_regularization_loss


def _with_gradient_times(value, factor):
    """`value` unchanged, with its gradient multiplied by `factor`."""

    @tf.custom_gradient
    def scaled(x):
        return tf.identity(x), lambda dy: dy * tf.cast(factor, dy.dtype)

    return scaled(value)


PATCHES = [
    keras_patches.Patch("keras.src.losses.loss", "reduce_weighted_values", _as_the_global_batch,
                        "a masked or sample-weighted mean, or a sum, counts as the global batch's",
                        parameters=("values", "sample_weight", "mask", "reduction", "dtype")),
    keras_patches.Patch("tensorflow.nn", "compute_average_loss", _average_loss_of_the_global_batch,
                        "tf.distribute's share of the global batch's loss trains as one process",
                        parameters=("per_example_loss", "sample_weight", "global_batch_size")),
    keras_patches.Patch("tensorflow.nn", "scale_regularization_loss", _per_replica_regularization,
                        "tf.distribute's share of a regularization loss trains as one process",
                        parameters=("regularization_loss",)),
]

KERAS_INTERNALS = [
    keras_patches.Internal("keras.src.losses.loss", "standardize_reduction", ("reduction",),
                           "the reduction Keras will apply, as it names it"),
    keras_patches.Internal("keras.src.losses.loss", "apply_mask", ("sample_weight", "mask", "dtype", "reduction"),
                           "the weights Keras divides a sample-weighted mean by"),
    keras_patches.Internal("keras.src.losses.loss", "squeeze_or_expand_to_same_rank", ("x1", "x2"),
                           "those weights shaped as Keras shapes them"),
]
