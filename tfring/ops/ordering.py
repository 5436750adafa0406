"""Every rank issues its collectives in the same order: why, and how tfring makes sure of it.

Why. The engine pairs collectives by position: the k-th collective a rank submits is reduced
with the k-th collective of every other rank (a tensor's name or graph position means nothing
across processes). If two ranks submit the same collectives in different orders, the engine
either pairs tensors that do not belong together, and fails with its mismatch error (naming the
rank, the collective's index and both shapes), or a rank waits for a collective that its peer
will only submit after one it is itself waiting for: a deadlock, until the timeout ends it with
`UnavailableError`. Program order is the same on every rank (every rank runs the same code), so
tfring makes each rank submit its collectives in program order.

How, by where the collective is built:

- Eagerly, an op runs when it is called: execution order is program order, nothing to do.
- In a graph (a `tf.function`, Keras' compiled step), TensorFlow runs any op whose inputs are
  ready, in any order, on several threads. Its automatic control dependencies order stateful ops
  mostly by the resources they touch (collectives touch none) and exist only in `tf.function`s,
  so tfring does not rely on them: `ordered` gives every collective built in a graph a control
  dependency on the previous one built in the same graph, a chain in program order. A composite
  that runs collectives inside it (a `tf.cond` with a collective in each branch) is built with
  `ordered` as a whole, which makes it one link of the chain; the collectives in its branches
  chain among themselves, in their own graphs. A stateful op that runs a nested graph and was not
  built with `ordered` (a user's `tf.cond` with a collective in a branch) is waited for by the
  next link built after it.
- Keras' step functions: Keras traces `train_step` (and test/predict) through `RingStrategy.run`
  inside its own `tf.function`, so the collectives the step builds there chain as above. Those in
  nested graphs that tfring does not build (the `tf.cond` of `LossScaleOptimizer` or of gradient
  accumulation, a `tf.function` called by a custom `train_step`) chain among themselves, but the
  op that runs the nested graph (`If`, `StatefulPartitionedCall`) is no link of the outer chain:
  the next link waits for it (above). Such an op is stateful (it holds stateful ops), and
  `after_ops_since(mark(), make)` builds `make()` after every stateful op created since the mark;
  `RingStrategy` builds the gathers of a step's outputs (the only collectives it adds after the
  step's own code) this way, so they come after everything the step ran. Keras'
  `steps_per_execution` loop runs steps one after another: a loop iteration's outputs depend on
  every stateful op it ran, and the next iteration starts from them.
"""

import tensorflow as tf
from tensorflow.python.ops import control_flow_util

_LAST = "_tfring_last_collective"  # the graph's last link: an op to depend on, or None
_SEEN = "_tfring_ops_at_last_link"  # how many ops the graph held when its last link was built
# Ops that run a nested graph, which may hold collectives; stateless ones cannot.
_NESTED_CALLS = ("If", "While", "Case", "StatefulPartitionedCall", "PartitionedCall")


def _graph_for_collectives():
    """The default graph, after checking that collectives can run in it (not under XLA)."""
    graph = tf.compat.v1.get_default_graph()
    if control_flow_util.GraphOrParentsInXlaContext(graph):
        raise ValueError(_xla_refusal(graph))
    return graph


# The functions Keras' TensorFlow trainer compiles with the model's `jit_compile`.
_KERAS_STEPS = ("one_step_on_data", "one_step_on_iterator", "multi_step_on_iterator")


def _xla_refusal(graph):
    """The error for a collective inside XLA-compiled code, naming whose jit_compile=True it is."""
    names = []
    while graph is not None:
        names += [graph.name] if getattr(graph, "name", "") else []
        graph = getattr(graph, "outer_graph", None)
    intro = ("tfring collectives cannot run inside XLA-compiled code (jit_compile=True): they have no XLA "
             "kernel. ")
    if any(step in name for name in names for step in _KERAS_STEPS):
        return intro + ("Compile the Keras model with jit_compile=False (under a distribution strategy 'auto' "
                        "is False; without one, as with tfring.horovod, Keras turns it on where a GPU is).")
    where = f"the function {names[0]!r}" + (f" or one it is called from ({', '.join(map(repr, names[1:]))})"
                                            if len(names) > 1 else "")
    return intro + (f"Here {where} is compiled with XLA: drop jit_compile=True from that tf.function, or call the "
                    f"collective outside it.")


def ordered(make):
    """Builds `make()` (ops that run collectives) as the next link of this graph's chain.

    Every collective op of `tfring.ops` is built this way; so is a composite that runs
    collectives inside it (a `tf.cond` with one in each branch). In a graph, everything `make()`
    creates gets a control dependency on the previous link, and the op of `make()`'s first output
    (or the op it returns) becomes the last link. Eagerly it just calls `make()`.

    Args:
        make: a function returning a tensor, an op, or a list/tuple of tensors.

    Returns:
        What `make()` returns.

    Raises:
        ValueError: the graph is compiled with XLA, where collectives cannot run.

    Example:

    >>> values, rows = ordered(lambda: tf.cond(dense, reduce_dense, gather_rows))
    """
    if tf.executing_eagerly():
        return make()
    graph = _graph_for_collectives()
    previous = getattr(graph, _LAST, None)
    waits = ([previous] if previous is not None else []) + _nested_calls_since_last_link(graph)
    if waits:
        with tf.control_dependencies(waits):
            result = make()
    else:
        result = make()
    outputs = result if isinstance(result, (list, tuple)) else [result]
    setattr(graph, _LAST, outputs[0].op if outputs and hasattr(outputs[0], "op") else result)
    setattr(graph, _SEEN, len(graph.get_operations()))
    return result


def _nested_calls_since_last_link(graph):
    """The stateful ops built since the graph's last link that run a nested graph (a `tf.cond`, a
    loop, a `tf.function` call): collectives inside them are no link of this chain, so the next
    link waits for them, or it could overtake them on one rank and not on another."""
    return [op for op in graph.get_operations()[getattr(graph, _SEEN, 0):]
            if op.type in _NESTED_CALLS and op._is_stateful]


def mark():
    """Marks the current point of the graph being built, for `after_ops_since`.

    Returns:
        An opaque mark (None eagerly).

    Example:

    >>> since = mark()
    """
    if tf.executing_eagerly():
        return None
    graph = tf.compat.v1.get_default_graph()
    return graph, len(graph.get_operations())


def after_ops_since(since, make):
    """Builds `make()` after every stateful op created in the graph since `since`.

    Those include ops that run nested graphs holding collectives (see the module docstring), so
    the collectives `make()` builds cannot overtake them. Eagerly (or with a mark taken eagerly)
    it just calls `make()`.

    Args:
        since: a `mark()` taken in the same graph.
        make: a function building the ops that must come after.

    Returns:
        What `make()` returns.

    Example:

    >>> since = mark()
    >>> outputs = step(batch)
    >>> gathered = after_ops_since(since, lambda: gather(outputs))
    """
    if since is None or tf.executing_eagerly():
        return make()
    graph, first = since
    stateful = [op for op in graph.get_operations()[first:] if op._is_stateful]
    with tf.control_dependencies(stateful):
        return make()
