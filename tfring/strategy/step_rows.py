"""Global batches that do not divide evenly among the ranks: each rank's share of a step.

The last batch of an epoch is usually short (397 rows in batches of 32 leave 13), and 13 rows
over 2 ranks give one rank 7 and the other 6; fewer rows than ranks leave some ranks none. Keras
scales each rank's loss (a mean over its own rows) by 1 / ranks before the gradients are summed,
which is the global mean only when every rank holds the same number of rows.

So every step first gathers each rank's row count (one small collective), and Keras' loss scaling
uses this rank's share of the global batch, rows / global rows, instead of 1 / ranks: the summed
gradients are then exactly the gradient of the global batch's mean, whatever each rank holds, and a
rank with no rows contributes nothing but still joins every collective. When all ranks hold the
same number of rows the share is 1 / ranks to the bit, so the even case is unchanged.

`keras_wraps.install` routes Keras' `scale_loss_for_distribution` / `unscale_loss_for_distribution` through
the share of the step being traced; outside a RingStrategy step they behave as before.
"""

import tensorflow as tf

from tfring.ops import collectives
from tfring.strategy import keras_patches


class StepRows:
    """Row counts of one step: this rank's, every rank's, and the shares derived from them.

    Args:
        local: this rank's row count, an int64 scalar tensor.
        size: the number of ranks.

    Example:

    >>> rows = StepRows.of((x_batch, y_batch), size=2)   # inside a step
    >>> loss * rows.share(loss.dtype)
    """

    def __init__(self, local, size):
        self.local = local
        self.counts = collectives.allgather(tf.reshape(local, [1]))
        self.total = tf.reduce_sum(self.counts)
        self.even = tf.reduce_all(tf.equal(self.counts, self.counts[0]))
        self._size = size

    @classmethod
    def of(cls, args, size):
        """The rows of the batch in `args` (the first dimension of its first tensor), or None.

        Args:
            args: the arguments of a step (nested structures of tensors).
            size: the number of ranks.

        Returns:
            A `StepRows`, or None when no argument is a tensor with at least one dimension.
            (In a custom loop, put the batch first among `strategy.run`'s arguments: its first
            dimension is taken as the step's rows.)
        """
        for t in tf.nest.flatten(args):
            if isinstance(t, tf.Tensor) and t.shape.rank:
                return cls(tf.shape(t, out_type=tf.int64)[0], size)
        return None

    def share(self, dtype):
        """This rank's rows / global rows (exactly 1 / ranks when all ranks hold the same rows).

        Args:
            dtype: the dtype of the result.

        Returns:
            A scalar tensor.
        """
        return self._ratio(self.local, self.total, 1.0 / self._size, dtype)

    def inverse_share(self, dtype):
        """Global rows / this rank's rows (exactly ranks when even; 0 for a rank with no rows).

        Args:
            dtype: the dtype of the result.

        Returns:
            A scalar tensor.
        """
        return self._ratio(self.total, self.local, float(self._size), dtype)

    def _ratio(self, numerator, denominator, when_even, dtype):
        # when_even is the exact value of the ratio when every rank holds the same rows.
        uneven = tf.math.divide_no_nan(tf.cast(numerator, tf.float64), tf.cast(denominator, tf.float64))
        return tf.cast(tf.where(self.even, tf.constant(when_even, tf.float64), uneven), dtype)

    def weighted(self, value):
        """`value` * share, with 0 (not NaN) from a rank that holds no rows.

        Args:
            value: a float tensor.

        Returns:
            A tensor like `value`.
        """
        return self.zero_if_empty([value * self.share(value.dtype)])[0]

    def zero_if_empty(self, values):
        """`values` unchanged, or zeros when this rank holds no rows.

        A rank with no rows still computes its step on an empty batch, and statistics of nothing
        (batch normalization's mean of zero rows) are NaN; NaN times a zero share is still NaN.
        What such a rank contributes to a sum over the ranks must be zero.

        Args:
            values: a list of tensors.

        Returns:
            A list of tensors like `values`.
        """
        values = [tf.convert_to_tensor(v) for v in values]
        return tf.cond(self.local > 0, lambda: [tf.identity(v) for v in values],
                       lambda: [tf.zeros_like(v) for v in values])


def current():
    """The `StepRows` of the RingStrategy step being traced, or None outside one.

    Returns:
        A `StepRows` or None.

    Example:

    >>> rows = current()   # inside strategy.run
    """
    strategy = tf.distribute.get_strategy()
    return getattr(strategy.extended, "step_rows", None)


def _scaled(original, scale):
    def wrapper(value):
        rows = current()
        if rows is None:
            return original(value)
        value = tf.convert_to_tensor(value)
        return value * scale(rows, value.dtype)

    return wrapper


def _scale_by_share(original):
    return _scaled(original, lambda rows, dtype: rows.share(dtype))


def _unscale_by_share(original):
    return _scaled(original, lambda rows, dtype: rows.inverse_share(dtype))


PATCHES = [
    keras_patches.Patch("keras.src.losses.loss", "scale_loss_for_distribution", _scale_by_share,
                        "a rank's loss counts by its rows' share of the global batch", parameters=("value",)),
    keras_patches.Patch("keras.src.losses.loss", "unscale_loss_for_distribution", _unscale_by_share,
                        "the inverse of scale_loss_for_distribution", parameters=("value",)),
]
