"""The collective order in a graph: the chain, composites as one link, and ops after a mark."""

import pytest
import tensorflow as tf

from tfring.ops import collectives
from tfring.ops import ordering


def _tfring_ops(graph):
    return [op for op in graph.get_operations() if op.type.startswith("Tfring")]


def _graph(build):
    # A plain graph: no automatic control dependencies, only the ones tfring adds.
    graph = tf.Graph()
    with graph.as_default():
        build(tf.compat.v1.placeholder(tf.float32, [2]), tf.compat.v1.placeholder(tf.bool, []))
    return graph


def test_a_composite_is_one_link_of_the_chain():
    def build(x, pred):
        collectives.allreduce(x)
        ordering.ordered(lambda: tf.cond(pred, lambda: collectives.allreduce(x), lambda: collectives.allgather(x)))
        collectives.allgather(x)

    graph = _graph(build)
    first, last = _tfring_ops(graph)
    composite = next(op for op in graph.get_operations() if op.type in ("If", "StatelessIf"))
    assert first in composite.control_inputs
    # The last collective depends on the composite (through the op of its first output).
    link = last.control_inputs[0]
    assert link is composite or composite in [t.op for t in link.inputs]


def test_ops_after_a_mark_wait_for_every_stateful_op_since():
    def build(x, pred):
        rows = tf.reshape(x, [1, -1])
        since = ordering.mark()
        # A nested graph built by someone else: its collectives are no link of this graph's chain.
        tf.cond(pred, lambda: collectives.allreduce(x), lambda: x)
        ordering.after_ops_since(since, lambda: (collectives.allgather(rows), tf.identity(x)))

    graph = _graph(build)
    nested = next(op for op in graph.get_operations() if op.type == "If")
    (gather,) = _tfring_ops(graph)
    assert nested in gather.control_inputs
    identity = [op for op in graph.get_operations() if op.type == "Identity"][-1]
    assert nested in identity.control_inputs  # everything make() builds waits, as a step's gathers do


def test_a_collective_after_a_nested_graph_holding_one_waits_for_it():
    # A user's tf.cond with a collective in a branch, not built with `ordered`: without the wait,
    # the allgather after it (whose input does not depend on it) could run first on one rank and
    # second on another, pairing different collectives across the ranks.
    def build(x, pred):
        collectives.allreduce(x)
        tf.cond(pred, lambda: collectives.allreduce(x), lambda: x)
        collectives.allgather(x)

    graph = _graph(build)
    nested = next(op for op in graph.get_operations() if op.type == "If")
    first, last = _tfring_ops(graph)
    assert nested in last.control_inputs and first in last.control_inputs
    assert nested not in first.control_inputs


def test_eagerly_everything_runs_in_program_order():
    assert ordering.mark() is None
    assert ordering.after_ops_since(None, lambda: 3) == 3
    assert ordering.ordered(lambda: 4) == 4


def test_collectives_refuse_xla_naming_the_users_function():
    def my_step(x):
        return collectives.allreduce(x)

    with pytest.raises(ValueError, match="cannot run inside XLA-compiled code") as raised:
        tf.function(my_step, jit_compile=True)(tf.constant([1.0]))
    assert "'my_step'" in str(raised.value) and "drop jit_compile=True from that tf.function" in str(raised.value)
    assert "Keras model" not in str(raised.value), "the flag was on the user's own tf.function"
