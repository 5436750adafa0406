"""Averaging, across ranks, the non-trainable variables a step assigns (batch-norm statistics, a
custom layer's running sums), when the ranks hold different numbers of rows. Keras' gradient
accumulators are not among them: each rank keeps its own (gradients.accumulation).

`RingStrategy` makes such variables mirrored with MEAN aggregation, so each assignment inside a
step is averaged over the ranks. With every rank holding rows that is a plain mean (as before).
Otherwise the kind of assignment decides:

- `assign(new_value)` (a batch-norm moving average): the new values are weighted by each rank's
  share of the rows, so the moving mean follows the global batch's mean, and a rank with no rows
  (whose statistics of nothing are NaN) has no say;
- `assign_add(delta)` / `assign_sub(delta)`: the deltas are averaged over all ranks as before, a
  rank with no rows adding zero (not NaN).

`MIRRORED_CLASSES` is the variable class mapping that records which kind is running.
"""

from tensorflow.python.distribute import distribute_utils
from tensorflow.python.distribute import values as values_lib
from tensorflow.python.ops import variables as variables_lib

from tfring.ops import collectives
from tfring.ops import ordering
from tfring.strategy import strategy_base


def _by_delta(variable):
    """Tells the strategy's reduction, while the assignment inside is traced, that it adds a delta."""
    return strategy_base.while_traced(variable._distribute_strategy.extended, "updating_by_delta", True)


class RingMirroredVariable(values_lib.MirroredVariable):
    """A MirroredVariable whose `assign_add`/`assign_sub` tell the strategy they add a delta."""

    def assign_add(self, value, use_locking=False, name=None, read_value=True):
        with _by_delta(self):
            return super().assign_add(value, use_locking=use_locking, name=name, read_value=read_value)

    def assign_sub(self, value, use_locking=False, name=None, read_value=True):
        with _by_delta(self):
            return super().assign_sub(value, use_locking=use_locking, name=name, read_value=read_value)


MIRRORED_CLASSES = dict(distribute_utils.VARIABLE_CLASS_MAPPING)
MIRRORED_CLASSES[variables_lib.VariableSynchronization.ON_WRITE] = RingMirroredVariable


def mean_over_ranks(rows, value, by_delta):
    """The MEAN of a variable update across ranks (see the module docstring).

    Args:
        rows: the step's `StepRows`.
        value: this rank's new value (or delta), a float tensor.
        by_delta: True for `assign_add`/`assign_sub`.

    Returns:
        The reduced tensor, identical on every rank.

    Example:

    >>> mean_over_ranks(rows, new_moving_mean, by_delta=False)
    """
    import tensorflow as tf

    if by_delta:
        return collectives.allreduce(rows.zero_if_empty([value])[0], op="mean")
    return ordering.ordered(lambda: tf.cond(
        rows.even,
        lambda: collectives.allreduce(value, op="mean"),
        lambda: collectives.allreduce(rows.weighted(value), op="sum")))
