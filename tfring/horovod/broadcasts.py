"""Horovod's broadcasts (`hvd.broadcast`, `hvd.broadcast_variables`, `hvd.broadcast_object`, ...)
and `hvd.allgather_object` on `tfring.ops`.

A broadcast's gradient is Horovod's: the incoming gradient averaged over the ranks on the root,
zero on the others. Booleans travel as uint8.
"""

import tensorflow as tf

from tfring import runtime
from tfring.horovod import collectives
from tfring.horovod import process_sets
from tfring.ops import collectives as ring
from tfring.ops import objects


def broadcast(tensor, root_rank, name=None, ignore_name_scope=False, process_set=process_sets.global_process_set):
    """The root's tensor on every rank (Horovod's `hvd.broadcast`).

    The gradient is Horovod's: the incoming gradient averaged over the ranks on the root, zero on
    the others.

    Args:
        tensor: a tensor, the same shape and type on every rank.
        root_rank: the rank whose value wins.
        name: ignored.
        ignore_name_scope: ignored.
        process_set: the `hvd.ProcessSet` to run over (default: every rank); only its ranks call it.

    Returns:
        The root's value.

    Example:

    >>> hvd.broadcast(tf.constant(hvd.rank()), root_rank=0)
    """
    set_id = process_sets.set_id(process_set, "hvd.broadcast")
    tensor = tf.convert_to_tensor(tensor)

    @tf.custom_gradient
    def cast(x):
        wide, narrow = collectives.widened(x)
        value = narrow(ring.broadcast(wide, root_rank=root_rank, process_set=set_id))

        def grad(dy):
            mean = ring.allreduce(dy, op="mean", process_set=set_id)
            if runtime.rank() == root_rank:
                return mean
            with tf.control_dependencies([mean]):  # a TF1 graph would otherwise prune the allreduce here only
                return tf.zeros_like(mean)

        return value, grad

    return cast(tensor)


def broadcast_variables(variables, root_rank, process_set=process_sets.global_process_set, inplace=False):
    """Assigns the root's values to `variables` on every rank (Horovod's `hvd.broadcast_variables`).

    Args:
        variables: a list of `tf.Variable`s or Keras variables.
        root_rank: the rank whose values win.
        process_set: the `hvd.ProcessSet` to run over (default: every rank); only its ranks call it.
        inplace: ignored (tfring always assigns in place).

    Returns:
        Eagerly None; in a graph, the op that assigns.

    Example:

    >>> hvd.broadcast_variables(model.variables, root_rank=0)
    """
    set_id = process_sets.set_id(process_set, "hvd.broadcast_variables")
    variables = list(variables)
    narrow = [v for v in variables if tf.as_dtype(v.dtype).base_dtype in collectives.NARROW_INTS]  # TF1 has int8_ref
    if not narrow:
        return ring.broadcast_variables(variables, root_rank=root_rank, process_set=set_id)
    values = [broadcast(tf.convert_to_tensor(v), root_rank, process_set=process_set) for v in narrow]
    others = ring.broadcast_variables([v for v in variables if all(v is not n for n in narrow)], root_rank=root_rank,
                                      process_set=set_id)
    return tf.group(others, *[v.assign(value) for v, value in zip(narrow, values)])


def broadcast_(variables, root_rank, name=None, process_set=process_sets.global_process_set):
    """Assigns the root's values to `variables` in place and returns them (Horovod's `hvd.broadcast_`).

    Args:
        variables: a list of `tf.Variable`s or Keras variables.
        root_rank: the rank whose values win.
        name: ignored.
        process_set: the `hvd.ProcessSet` to run over (default: every rank); only its ranks call it.

    Returns:
        The variables' values after the broadcast, a list of tensors.

    Example:

    >>> values = hvd.broadcast_([v1, v2], root_rank=0)
    """
    variables = list(variables)
    assigned = broadcast_variables(variables, root_rank, process_set=process_set)
    with tf.control_dependencies([assigned] if assigned is not None else []):
        return [tf.identity(tf.convert_to_tensor(v)) for v in variables]  # read after the assignment


def broadcast_global_variables(root_rank):
    """Broadcasts every global variable of the TF1 graph from the root (Horovod's TF1 call).

    Returns:
        The op that assigns them (run it in the session).

    Raises:
        RuntimeError: called eagerly (TF2 has no global variables: use `broadcast_variables`).
    """
    if tf.executing_eagerly():
        raise RuntimeError("hvd.broadcast_global_variables() does not support eager execution. Please use "
                           "`hvd.broadcast_variables(<model/optimizer variables>)` instead.")
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank)


def broadcast_object(obj, root_rank=0, session=None, name=None, process_set=process_sets.global_process_set):
    """The root's Python object on every rank (Horovod's `hvd.broadcast_object`).

    Any picklable object, as Horovod's; tfring signs the pickle with the job secret and every rank
    checks the signature before unpickling, so nothing a process outside the job sends is
    unpickled (`tfring.ops.objects`). Eagerly, or in a TF1 graph through `session` (or the default one).

    Args:
        obj: the object (on the root).
        root_rank: the rank whose object wins.
        session: in a TF1 graph, the session that runs the collectives.
        name: ignored.
        process_set: the `hvd.ProcessSet` to run over (default: every rank); only its ranks call it.

    Returns:
        The root's object.

    Raises:
        ValueError: on every rank, when the root's object cannot be pickled (the message says why).

    Example:

    >>> state = hvd.broadcast_object({"epoch": 3, 0: [1, 2]}, root_rank=0)
    """
    set_id = process_sets.set_id(process_set, "hvd.broadcast_object")
    return objects.broadcast_object(obj, root_rank=root_rank, serializer="pickle", session=session, process_set=set_id)


def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=process_sets.global_process_set):
    """A function that broadcasts an object from the root (Horovod's TF1 `hvd.broadcast_object_fn`).

    Returns:
        `f(obj)`: `broadcast_object(obj, root_rank, session)`.

    Example:

    >>> bcast = hvd.broadcast_object_fn(root_rank=0)
    >>> obj = bcast(obj)
    """
    process_sets.set_id(process_set, "hvd.broadcast_object_fn")
    return lambda obj: broadcast_object(obj, root_rank, session, process_set=process_set)


def allgather_object(obj, session=None, name=None, process_set=process_sets.global_process_set):
    """Every rank's Python object, in rank order (Horovod's `hvd.allgather_object`), pickled and signed
    as `broadcast_object` sends them.

    Returns:
        A list of `size()` objects.

    Example:

    >>> hvd.allgather_object({"loss": 0.5})
    """
    set_id = process_sets.set_id(process_set, "hvd.allgather_object")
    return objects.allgather_object(obj, serializer="pickle", session=session, process_set=set_id)
