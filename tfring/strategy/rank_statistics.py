"""Averaging, across ranks, the non-trainable variables a step assigns (batch-norm statistics, a
custom layer's running sums), when the ranks hold different numbers of rows, and in one collective
per step. Keras' gradient accumulators are not among them: each rank keeps its own
(gradients.accumulation).

`RingStrategy` makes such variables mirrored with MEAN aggregation, so each assignment inside a
step is averaged over the ranks. With every rank holding rows that is a plain mean (as before).
Otherwise the kind of assignment decides:

- `assign(new_value)` (a batch-norm moving average): the new values are weighted by each rank's
  share of the rows, so the moving mean follows the global batch's mean, and a rank with no rows
  (whose statistics of nothing are NaN) has no say;
- `assign_add(delta)` / `assign_sub(delta)`: the deltas are averaged over all ranks as before, a
  rank with no rows adding zero (not NaN).

One collective per step. A net of 24 batch-norm layers assigns 48 statistics a step; reduced one
by one, each paid a collective's fixed cost (about 66 us on 2 ranks, mostly TensorFlow's
scheduling). So the assignments a step makes in its own graph wait (`StepStatistics`): the step's
end reduces them all together (one fused allreduce per dtype) and assigns them. A read of a
waiting variable inside the step (a layer called twice, a running sum read after its update)
first reduces and assigns everything waiting, so every read sees what it saw when each
assignment was reduced at once; so does a second assignment to a waiting variable. Assignments in
a nested graph (a `tf.cond` branch, a loop body) and eager ones are reduced at once, as before.

`MIRRORED_CLASSES` is the variable class mapping that records which kind is running.
"""

from typing import NamedTuple

import tensorflow as tf
from tensorflow.python.distribute import distribute_utils
from tensorflow.python.distribute import values as values_lib
from tensorflow.python.ops import variables as variables_lib

from tfring.ops import collectives
from tfring.ops import ordering
from tfring.strategy import strategy_base

def _by_delta(variable):
    """Tells the strategy's reduction, while the assignment inside is traced, that it adds a delta."""
    return strategy_base.while_traced(variable._distribute_strategy.extended, "updating_by_delta", True)


def _statistics_of(variable):
    """The `StepStatistics` of the step being traced for `variable`'s strategy, or None."""
    return getattr(variable._distribute_strategy.extended, "statistics", None)


def _waiting(variable):
    """The step's `StepStatistics` if an assignment to `variable` traced now can wait, else None."""
    statistics = _statistics_of(variable)
    if statistics is None or variable.aggregation != tf.VariableAggregation.MEAN:
        return None
    if tf.executing_eagerly() or tf.distribute.in_cross_replica_context():
        return None
    return statistics if tf.compat.v1.get_default_graph() is statistics.graph else None


class RingMirroredVariable(values_lib.MirroredVariable):
    """A MirroredVariable whose assignments in a step wait for the step's one collective
    (`StepStatistics`) and whose `assign_add`/`assign_sub` tell the strategy they add a delta."""

    def _assign(self, kind, value, use_locking, name, read_value):
        statistics = _waiting(self)
        if statistics is not None:
            return statistics.add(self, kind, value, read_value)
        if kind == "assign":
            return super().assign(value, use_locking=use_locking, name=name, read_value=read_value)
        with _by_delta(self):
            return getattr(super(), kind)(value, use_locking=use_locking, name=name, read_value=read_value)

    def assign(self, value, use_locking=False, name=None, read_value=True):
        return self._assign("assign", value, use_locking, name, read_value)

    def assign_add(self, value, use_locking=False, name=None, read_value=True):
        return self._assign("assign_add", value, use_locking, name, read_value)

    def assign_sub(self, value, use_locking=False, name=None, read_value=True):
        return self._assign("assign_sub", value, use_locking, name, read_value)

    def _flush_if_waiting(self):
        statistics = _statistics_of(self)
        if statistics is not None and statistics.holds(self):
            statistics.flush()

    # Every read inside a step (value(), read_value(), conversion to a tensor, attributes) comes
    # through one of these two.
    def _get_replica(self, replica_id):
        self._flush_if_waiting()
        return super()._get_replica(replica_id)

    @property
    def handle(self):
        self._flush_if_waiting()
        return super().handle


MIRRORED_CLASSES = dict(distribute_utils.VARIABLE_CLASS_MAPPING)
MIRRORED_CLASSES[variables_lib.VariableSynchronization.ON_WRITE] = RingMirroredVariable


class _Waiting(NamedTuple):
    """An assignment waiting for the step's collective."""

    variable: object  # the RingMirroredVariable
    kind: str  # "assign", "assign_add" or "assign_sub"
    value: object  # this rank's new value or delta
    ops_before: int  # how many ops the step's graph held when it began to wait


class StepStatistics:
    """The statistics one step assigned in its graph, reduced together (see the module docstring).

    Args:
        rows: the step's `StepRows`.
        since: an `ordering.mark()` taken in the step's graph as it starts. Assignments traced in
            that graph wait, others are reduced at once; the collective comes after every stateful
            op since the mark, so it cannot overtake one that runs a nested graph holding
            collectives (see `ordering`).

    Example:

    >>> statistics = StepStatistics(rows, ordering.mark())
    >>> outputs = step()                      # moving_mean.assign(...) waits here
    >>> statistics.flush()                    # one allreduce, then every assignment
    """

    def __init__(self, rows, since):
        self.rows = rows
        self.since = since
        self.graph = since[0]
        self._waiting = []  # _Waiting entries, in program order

    def holds(self, variable):
        """Whether an assignment to `variable` waits."""
        return any(w.variable is variable for w in self._waiting)

    def add(self, variable, kind, value, read_value):
        """Makes an assignment wait for the step's collective.

        Args:
            variable: the `RingMirroredVariable`.
            kind: "assign", "assign_add" or "assign_sub".
            value: this rank's new value or delta.
            read_value: as the assignment's; True returns the variable (reading it flushes).

        Returns:
            The variable, or a no-op when `read_value` is False.
        """
        value = tf.convert_to_tensor(value, dtype=variable.dtype)
        variable.shape.assert_is_compatible_with(value.shape)
        if self.holds(variable):
            self.flush()  # its earlier assignment first, as if each were reduced at once
        self._waiting.append(_Waiting(variable, kind, value, len(self.graph.get_operations())))
        return variable if read_value else tf.no_op()

    def flush(self):
        """Reduces every waiting assignment in one collective per dtype and assigns the results.

        Returns:
            The assignment ops (none when nothing waits).
        """
        waiting, self._waiting = self._waiting, []
        if not waiting:
            return []
        _refuse_stale_reads(self.graph, waiting)

        def reduce_and_assign():
            reduced = mean_over_ranks(self.rows, [w.value for w in waiting], [w.kind != "assign" for w in waiting])
            # The single component, directly: the values are reduced already.
            return [getattr(w.variable._values[0], w.kind)(value, read_value=False)
                    for w, value in zip(waiting, reduced)]

        # A read inside a nested graph (a tf.cond branch) flushes into the step's graph, before
        # the op that runs the nested graph.
        with self.graph.as_default():
            return ordering.after_ops_since(self.since, reduce_and_assign)


def _refuse_stale_reads(graph, waiting):
    """Raises if an op built while a statistic waited took the variable's handle without reading
    it through the mirrored variable (which would have reduced it first): a `tf.function` traced
    before and called again, a loaded function. That op would read the value from before the
    step's assignment, where each assignment reduced at once gave it the new one.

    Args:
        graph: the step's graph.
        waiting: the `_Waiting` entries about to be reduced.

    Raises:
        ValueError: naming the op and the variable.
    """
    captured = {id(external): internal for external, internal in getattr(graph, "captures", [])}
    operations = graph.get_operations()
    for entry in waiting:
        variable = entry.variable
        handle = captured.get(id(variable._values[0].handle))
        if handle is None:
            continue
        for op in operations[entry.ops_before:]:
            if any(t is handle for t in op.inputs):
                raise ValueError(
                    f"tfring: {op.name!r} reads the variable {variable.name!r} after this step assigned it, "
                    f"without going through the variable (a tf.function traced before and called again, or a "
                    f"loaded function). RingStrategy averages a step's assigned statistics across ranks together "
                    f"at the step's end, and reduces them early when the variable is read; this read would see "
                    f"the value from before the assignment. Read the variable itself in the step (not through a "
                    f"function traced earlier), or move the read before the assignment.")


def mean_over_ranks(rows, values, by_delta):
    """The MEAN of variable updates across ranks (see the module docstring), in one collective per
    dtype when every rank holds the same rows.

    Args:
        rows: the step's `StepRows`.
        values: this rank's new values (or deltas), float tensors.
        by_delta: for each value, True for `assign_add`/`assign_sub`.

    Returns:
        The reduced tensors, identical on every rank.

    Example:

    >>> mean_over_ranks(rows, [new_moving_mean, new_moving_variance], [False, False])
    """
    news = [k for k, delta in enumerate(by_delta) if not delta]
    deltas = [k for k, delta in enumerate(by_delta) if delta]

    def pick(indices):
        return [values[k] for k in indices]

    def zeroed_deltas():
        return rows.zero_if_empty(pick(deltas)) if deltas else []

    def even():
        # Every rank holds rows: the plain mean of every value at once.
        return collectives.allreduce(pick(news) + zeroed_deltas(), op="mean")

    def uneven():
        return (collectives.allreduce(rows.weighted(pick(news)), op="sum") if news else []) + (
            collectives.allreduce(zeroed_deltas(), op="mean") if deltas else [])

    both = ordering.ordered(lambda: tf.cond(rows.even, even, uneven))
    both = both if isinstance(both, (list, tuple)) else [both]
    result = [None] * len(values)
    for k, value in zip(news + deltas, both):
        result[k] = value
    return result
