"""Small Python values across ranks: `broadcast_object` and `allgather_object`.

They return Python values: they run eagerly, or in a TF1 graph through its session (as Horovod's
do), not inside a `tf.function`. Values travel in one of two forms, the same on every rank:
- "json" (the default): what JSON holds, dicts with string keys, lists, strings, numbers,
  booleans and None (tuples come back as lists). A dict with a key of another type is refused,
  not silently turned into strings. Nothing received is executed.
- "pickle": any picklable value (Horovod's habit). Unpickling runs code, so each rank signs what
  it pickles with the job secret (HMAC-SHA256, computed in the core, which holds the secret) and
  every receiver checks the signature before it unpickles: only values pickled by the job's own
  ranks are ever unpickled; anything else fails naming the rank it came from.

Every call is two allgathers whatever happens, so the ranks stay in step:
- first, each rank's header: the size of what it sends, and the call's `root_rank` and `max_bytes`.
  Ranks that disagree on either fail together, naming both values (otherwise each rank would
  return a different value, silently);
- then the bytes, each rank's framed: a value, or the error its rank met encoding it. Any
  exception while encoding (a value too deep, a key that is not a string, a value over
  `max_bytes`) is sent as such an error, and every rank then fails with the same message. The
  frame is outside the value, so no dict a user sends can pass for an error.
"""

import contextlib
import hmac
import json
import pickle

import numpy as np
import tensorflow as tf

from tfring import checks
from tfring import runtime
from tfring.ops import collectives

DEFAULT_MAX_BYTES = 16 << 20
SERIALIZERS = ("json", "pickle")
_VALUE, _ERROR = b"V", b"E"
_SIGNATURE_BYTES = 32


def _string_keys_only(obj):
    """Raises TypeError naming a dict key that is not a string (JSON would turn it into one)."""
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, value in item.items():
                if not isinstance(key, str):
                    raise TypeError(f"a dict key is {key!r} ({type(key).__name__}); only string keys travel "
                                    f"unchanged as JSON")
                stack.append(value)
        elif isinstance(item, (list, tuple)):
            stack.extend(item)


def _serialize(obj, serializer):
    if serializer == "json":
        _string_keys_only(obj)
        return json.dumps(obj, allow_nan=True, separators=(",", ":")).encode()
    data = pickle.dumps(obj)
    return runtime.sign_object(data) + data


def _deserialize(data, serializer, rank):
    if serializer == "json":
        return json.loads(data.decode())
    signature, data = data[:_SIGNATURE_BYTES], data[_SIGNATURE_BYTES:]
    if not hmac.compare_digest(signature, runtime.sign_object(data)):
        raise ValueError(f"the pickled value from rank {rank} does not carry this job's signature: it was not "
                         f"unpickled (was it sent by a process outside the job?)")
    try:
        return pickle.loads(data)  # signed by a rank of this job: see the module docstring
    except Exception as e:  # a class this rank lacks, a __setstate__ that raises, ...
        raise ValueError(f"the pickled value from rank {rank} could not be unpickled on this rank "
                         f"({type(e).__name__}: {e}): do the ranks import the same code?") from e


def _encode(obj, what, max_bytes, serializer):
    """`obj` framed as a value, or the error met encoding it framed as an error."""
    try:
        data = _serialize(obj, serializer)
    except Exception as e:  # every failure still takes part in the collective: RecursionError too
        return _ERROR + f"{what}: the value cannot be sent as {serializer} ({type(e).__name__}: {e})".encode()
    if len(data) > max_bytes:
        return _ERROR + (f"{what}: the value takes {len(data)} bytes as {serializer}, over the limit of "
                         f"{max_bytes} (max_bytes)").encode()
    return _VALUE + data


def _decode(data, rank, serializer):
    data = bytes(data)
    if data[:1] == _ERROR:
        raise ValueError(f"{data[1:].decode(errors='replace')} (on rank {rank})")
    return _deserialize(data[1:], serializer, rank)


def _agree(what, headers, field, name):
    """Raises on every rank when the ranks passed different `name`s (column `field` of `headers`)."""
    values = headers[:, field]
    if (values != values[0]).any():
        other = int(np.flatnonzero(values != values[0])[0])
        raise ValueError(f"{what}: rank 0 passed {name}={int(values[0])} but rank {other} passed "
                         f"{name}={int(values[other])}: every rank must pass the same {name}")


def _evaluate(tensor, session):
    """`tensor`'s value: eagerly at once, in a TF1 graph through `session` (or the default one)."""
    if tf.executing_eagerly():
        return tensor.numpy()
    session = session or tf.compat.v1.get_default_session()
    if session is None or tf.compat.v1.get_default_graph().building_function:
        raise RuntimeError("tfring's object collectives (broadcast_object, allgather_object) return Python values: "
                           "call them eagerly, or in a TF1 graph with a session (session= or a default one), not "
                           "inside a tf.function (in a graph, broadcast tensors with tfring.ops.broadcast)")
    return session.run(tensor)


@contextlib.contextmanager
def _named(what):
    """Errors of the allgathers inside `what` (e.g. refused after a join) name `what`, not only the
    internal allgather."""
    try:
        yield
    except tf.errors.OpError as e:
        raise type(e)(e.node_def, e.op, f"{what} (its values travel in an allgather): {e.message}") from e


def _gather_frames(what, frame, root_rank, max_bytes, serializer, session, process_set):
    """Every rank's frame, as a list in rank order, after checking the ranks agree on the call."""
    header = [[len(frame), root_rank, max_bytes, SERIALIZERS.index(serializer)]]
    with _named(what):
        headers = _evaluate(collectives.allgather(tf.constant(header, tf.int64), process_set=process_set), session)
        _agree(what, headers, 1, "root_rank")
        _agree(what, headers, 2, "max_bytes")
        _agree(what, headers, 3, "serializer (0: json, 1: pickle)")
        data = tf.constant(np.frombuffer(frame, dtype=np.uint8))
        gathered = _evaluate(collectives.allgather(data, process_set=process_set), session).tobytes()
    offsets = np.concatenate([[0], np.cumsum(headers[:, 0])])
    return [gathered[offsets[r]:offsets[r + 1]] for r in range(len(headers))]


def broadcast_object(obj, root_rank=0, max_bytes=DEFAULT_MAX_BYTES, serializer="json", session=None, process_set=0):
    """Returns `root_rank`'s `obj` on every rank (a JSON or signed pickled value: see the module docstring).

    Every rank must call it; the other ranks' `obj` is ignored.

    Args:
        obj: the value (on the root).
        root_rank: the rank whose value everyone receives.
        max_bytes: the largest encoding accepted.
        serializer: "json" (default) or "pickle" (any picklable value, signed with the job secret).
        session: in a TF1 graph, the session that runs the collectives (default: the default session).
        process_set: 0 (every rank) or the id of a process set (`tfring.ops.add_process_set`) that
            holds `root_rank`: only its ranks call it.

    Returns:
        The root's value.

    Raises:
        ValueError: on every rank, when the root's value cannot be encoded or is too large, when a
            pickled value does not carry the job's signature, or when the ranks passed different
            `root_rank`s, `max_bytes` or `serializer`s.
        RuntimeError: inside a `tf.function`, or in a TF1 graph without a session.

    Example:

    >>> config = tfring.broadcast_object({"lr": 0.1, "run": run_name})
    """
    root_rank = checks.number("broadcast_object", "root_rank", root_rank, integer=True, at_least=0,
                              below=runtime.size())
    max_bytes = checks.number("broadcast_object", "max_bytes", max_bytes, integer=True, at_least=0)
    checks.choice("broadcast_object", "serializer", serializer, SERIALIZERS)
    members = runtime.process_set_ranks(process_set)
    if root_rank not in members:
        raise ValueError(f"broadcast_object: root_rank {root_rank} is not in process set {process_set} "
                         f"(ranks {members})")
    frame = _encode(obj, "broadcast_object", max_bytes, serializer) if runtime.rank() == root_rank else _VALUE
    frames = _gather_frames("broadcast_object", frame, root_rank, max_bytes, serializer, session, process_set)
    return _decode(frames[members.index(root_rank)], root_rank, serializer)


def allgather_object(obj, max_bytes=DEFAULT_MAX_BYTES, serializer="json", session=None, process_set=0):
    """Returns a list of every rank's `obj`, in rank order (JSON or signed pickled values: see the module docstring).

    Args:
        obj: this rank's value.
        max_bytes: the largest encoding accepted per rank.
        serializer: "json" (default) or "pickle" (any picklable value, signed with the job secret).
        session: in a TF1 graph, the session that runs the collectives (default: the default session).
        process_set: 0 (every rank) or a process set's id (`tfring.ops.add_process_set`): only its
            ranks call it, and the list holds theirs.

    Returns:
        A list of `size()` values (the set's size with `process_set`), in rank order.

    Raises:
        ValueError: on every rank, when some rank's value cannot be encoded, is too large or (pickle)
            does not carry the job's signature (the message names the rank), or when the ranks
            passed different `max_bytes` or `serializer`s.
        RuntimeError: inside a `tf.function`, or in a TF1 graph without a session.

    Example:

    >>> counts = tfring.allgather_object(len(my_files))
    """
    max_bytes = checks.number("allgather_object", "max_bytes", max_bytes, integer=True, at_least=0)
    checks.choice("allgather_object", "serializer", serializer, SERIALIZERS)
    frame = _encode(obj, "allgather_object", max_bytes, serializer)
    frames = _gather_frames("allgather_object", frame, -1, max_bytes, serializer, session, process_set)
    members = runtime.process_set_ranks(process_set)
    return [_decode(f, r, serializer) for r, f in zip(members, frames)]  # the first rank's error raises
