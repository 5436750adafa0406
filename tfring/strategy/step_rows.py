"""Each rank's share of a step's rows, and the rule that makes every way of writing a loss exact.

The rule: **a rank's loss is what one process computes on that rank's rows** (a mean over its
rows, as a user writes it for one process), and the job's gradient is the mean of the ranks'
gradients weighted by their rows. So the loss a user writes needs no scaling for the job: Keras'
own 1 / replicas scaling (`scale_loss_for_distribution`, inside every `keras.losses.Loss`, and on
what `add_loss` adds) does nothing under a RingStrategy, and the optimizer's door
(`gradients.door`) averages the ranks' gradients by rows. A custom `train_step` with its own tape
and `ops.mean`, two optimizers in one step, `compute_loss` overridden, `add_loss` with plain ops or
with `Loss` objects, and `compile`'s losses then all train as one process does. Losses whose
one-process value is not a mean over rows are expressed per rank so that the same weighted mean
gives it (`gradients.loss_reductions`: sums, masked and sample-weighted means, and
`tf.nn.compute_average_loss`).

The last batch of an epoch is usually short (397 rows in batches of 32 leave 13), and 13 rows
over 2 ranks give one rank 7 and the other 6; fewer rows than ranks leave some ranks none. So
every step first gathers each rank's row count (one small collective), and the weights are each
rank's share of the global batch, rows / global rows: exactly 1 / ranks when every rank holds the
same number of rows, so that the even case is a plain mean over the ranks.

A scalar fed to a `keras.metrics.Mean` inside a step (a loss tracker) counts for its rank's rows
too, so the logged value is the global batch's whatever each rank holds.
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
        self.counts = _of_ranks(collectives.allgather(tf.reshape(local, [1])), size)
        self.total = tf.reduce_sum(self.counts)
        self.even = tf.reduce_all(tf.equal(self.counts, self.counts[0]))
        self.size = size

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

    def after_counts(self, structure):
        """`structure`'s tensors, each available only once the step's row counts are.

        Args:
            structure: a nest of tensors and other values (the step's arguments).

        Returns:
            The same nest.
        """
        with tf.control_dependencies([self.even, self.total]):
            return tf.nest.map_structure(lambda t: tf.identity(t) if isinstance(t, tf.Tensor) else t, structure)

    def share(self, dtype):
        """This rank's rows / global rows (exactly 1 / ranks when all ranks hold the same rows).

        Args:
            dtype: the dtype of the result.

        Returns:
            A scalar tensor.
        """
        return self._ratio(self.local, self.total, 1.0 / self.size, dtype)

    def inverse_share(self, dtype):
        """Global rows / this rank's rows (exactly ranks when even; 0 for a rank with no rows).

        Args:
            dtype: the dtype of the result.

        Returns:
            A scalar tensor.
        """
        return self._ratio(self.total, self.local, float(self.size), dtype)

    def _ratio(self, numerator, denominator, when_even, dtype):
        # when_even is the exact value of the ratio when every rank holds the same rows.
        uneven = tf.math.divide_no_nan(tf.cast(numerator, tf.float64), tf.cast(denominator, tf.float64))
        return tf.cast(tf.where(self.even, tf.constant(when_even, tf.float64), uneven), dtype)

    def weighted(self, values):
        """`values` * share, with 0 (not NaN) from a rank that holds no rows (one decision for all).

        Args:
            values: a list of float tensors.

        Returns:
            A list of tensors like `values`.
        """
        return self.zero_if_empty([v * self.share(v.dtype) for v in values])

    def weight(self, dtype):
        """This rank's rows over the mean rows per rank: ranks * share, exactly 1 when even.

        Args:
            dtype: the dtype of the result.

        Returns:
            A scalar tensor.
        """
        return self._ratio(self.local * self.size, self.total, 1.0, dtype)

    def for_mean(self, values):
        """`values` as this rank's part of a mean over the ranks that weighs each rank by its rows.

        A plain mean over the ranks of what this returns is the rows-weighted mean: the values
        unchanged when every rank holds the same rows (no arithmetic), `values` * ranks * share
        otherwise, and zeros from a rank that holds no rows.

        Args:
            values: a list of float tensors.

        Returns:
            A list of tensors like `values`.
        """
        values = [tf.convert_to_tensor(v) for v in values]
        return tf.cond(self.even, lambda: self.zero_if_empty(values),
                       lambda: self.zero_if_empty([v * self.weight(v.dtype) for v in values]))

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


def in_ring_strategy():
    """True under a RingStrategy (its scope, or one of its steps).

    Returns:
        bool.

    Example:

    >>> with strategy.scope():
    ...     in_ring_strategy()
    True
    """
    return hasattr(tf.distribute.get_strategy().extended, "step_rows")


def _unscaled(original):
    # The rule above: a rank's loss is what one process computes on its rows; nothing to scale.
    def wrapper(value):
        return value if in_ring_strategy() else original(value)

    return wrapper


def _weighted_scalars(original):
    def update_state(self, values, sample_weight=None):
        rows = current()
        if rows is None or sample_weight is not None:
            return original(self, values, sample_weight=sample_weight)
        values = tf.convert_to_tensor(values)
        if values.shape.rank != 0 or not values.dtype.is_floating:
            return original(self, values, sample_weight=sample_weight)
        return original(self, rows.zero_if_empty([values])[0], sample_weight=rows.weight(values.dtype))

    return update_state


PATCHES = [
    keras_patches.Patch("keras.src.losses.loss", "scale_loss_for_distribution", _unscaled,
                        "a rank's loss is what one process computes on its rows; the door weighs the "
                        "ranks' gradients by rows", parameters=("value",)),
    keras_patches.Patch("keras.src.losses.loss", "unscale_loss_for_distribution", _unscaled,
                        "the inverse of scale_loss_for_distribution", parameters=("value",)),
    keras_patches.Patch("keras.metrics.Mean", "update_state", _weighted_scalars,
                        "a scalar tracked in a step (a loss tracker) counts for its rank's rows",
                        parameters=("self", "values", "sample_weight")),
]


def _of_ranks(counts, size):
    """`counts`, once they are checked to come from the `size` ranks the step was traced for: a
    step traced before an elastic job re-formed in its processes (`tfring.elastic`) would weigh
    the ranks' gradients for the old number of ranks."""
    if tf.executing_eagerly():
        return counts
    check = tf.debugging.assert_equal(
        tf.size(counts, out_type=tf.int64), tf.constant(size, tf.int64),
        message=f"tfring: this step was traced for {size} ranks, and the job has gone on with another number of "
                "ranks in this process (tfring.elastic): trace it again (make the tf.function inside the function "
                "tfring.elastic.run calls, or again in a reset callback)")
    with tf.control_dependencies([check]):
        return tf.identity(counts)
