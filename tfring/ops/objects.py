"""Small Python values across ranks: `broadcast_object` and `allgather_object`.

Eager only (they return Python values), like Horovod's. Values travel as JSON (never pickle:
nothing received is executed), so they are what JSON holds: dicts with string keys, lists,
strings, numbers, booleans and None (tuples come back as lists). A dict with a key of another type
is refused, not silently turned into strings.

Every call is two allgathers whatever happens, so the ranks stay in step:
- first, each rank's header: the size of what it sends, and the call's `root_rank` and `max_bytes`.
  Ranks that disagree on either fail together, naming both values (otherwise each rank would
  return a different value, silently);
- then the bytes, each rank's framed: a value, or the error its rank met encoding it. Any
  exception while encoding (a value too deep, a key that is not a string, a value over
  `max_bytes`) is sent as such an error, and every rank then fails with the same message. The
  frame is outside the value, so no dict a user sends can pass for an error.
"""

import json

import numpy as np
import tensorflow as tf

from tfring import checks
from tfring.ops import collectives

DEFAULT_MAX_BYTES = 16 << 20
_VALUE, _ERROR = b"V", b"E"


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


def _encode(obj, what, max_bytes):
    """`obj` framed as a value, or the error met encoding it framed as an error."""
    try:
        _string_keys_only(obj)
        data = json.dumps(obj, allow_nan=True, separators=(",", ":")).encode()
    except Exception as e:  # every failure still takes part in the collective: RecursionError too
        return _ERROR + f"{what}: the value is not JSON-serialisable ({type(e).__name__}: {e})".encode()
    if len(data) > max_bytes:
        return _ERROR + (f"{what}: the value takes {len(data)} bytes as JSON, over the limit of {max_bytes} "
                         f"(max_bytes)").encode()
    return _VALUE + data


def _decode(data, rank):
    data = bytes(data)
    if data[:1] == _ERROR:
        raise ValueError(f"{data[1:].decode(errors='replace')} (on rank {rank})")
    return json.loads(data[1:].decode())


def _agree(what, headers, field, name):
    """Raises on every rank when the ranks passed different `name`s (column `field` of `headers`)."""
    values = headers[:, field]
    if (values != values[0]).any():
        other = int(np.flatnonzero(values != values[0])[0])
        raise ValueError(f"{what}: rank 0 passed {name}={int(values[0])} but rank {other} passed "
                         f"{name}={int(values[other])}: every rank must pass the same {name}")


def _gather_frames(what, frame, root_rank, max_bytes):
    """Every rank's frame, as a list in rank order, after checking the ranks agree on the call."""
    if not tf.executing_eagerly():
        raise RuntimeError("tfring's object collectives (broadcast_object, allgather_object) run eagerly only: "
                           "they return Python values. Call them outside tf.function and TF1 graph mode "
                           "(in a graph, broadcast tensors with tfring.ops.broadcast)")
    headers = collectives.allgather(tf.constant([[len(frame), root_rank, max_bytes]], tf.int64)).numpy()
    _agree(what, headers, 1, "root_rank")
    _agree(what, headers, 2, "max_bytes")
    gathered = collectives.allgather(tf.constant(np.frombuffer(frame, dtype=np.uint8))).numpy().tobytes()
    offsets = np.concatenate([[0], np.cumsum(headers[:, 0])])
    return [gathered[offsets[r]:offsets[r + 1]] for r in range(len(headers))]


def broadcast_object(obj, root_rank=0, max_bytes=DEFAULT_MAX_BYTES):
    """Returns `root_rank`'s `obj` on every rank (a JSON value: see the module docstring).

    Every rank must call it; the other ranks' `obj` is ignored.

    Args:
        obj: the value (on the root).
        root_rank: the rank whose value everyone receives.
        max_bytes: the largest JSON encoding accepted.

    Returns:
        The root's value, decoded from JSON.

    Raises:
        ValueError: on every rank, when the root's value is not JSON-serialisable or too large, or
            when the ranks passed different `root_rank`s or `max_bytes`.

    Example:

    >>> config = tfring.broadcast_object({"lr": 0.1, "run": run_name})
    """
    from tfring import runtime

    root_rank = checks.number("broadcast_object", "root_rank", root_rank, integer=True, at_least=0,
                              below=runtime.size())
    max_bytes = checks.number("broadcast_object", "max_bytes", max_bytes, integer=True, at_least=0)
    frame = _encode(obj, "broadcast_object", max_bytes) if runtime.rank() == root_rank else _VALUE
    return _decode(_gather_frames("broadcast_object", frame, root_rank, max_bytes)[root_rank], root_rank)


def allgather_object(obj, max_bytes=DEFAULT_MAX_BYTES):
    """Returns a list of every rank's `obj`, in rank order (JSON values: see the module docstring).

    Args:
        obj: this rank's value.
        max_bytes: the largest JSON encoding accepted per rank.

    Returns:
        A list of `size()` values.

    Raises:
        ValueError: on every rank, when some rank's value is not JSON-serialisable or too large (the
            message names the rank), or when the ranks passed different `max_bytes`.

    Example:

    >>> counts = tfring.allgather_object(len(my_files))
    """
    max_bytes = checks.number("allgather_object", "max_bytes", max_bytes, integer=True, at_least=0)
    frames = _gather_frames("allgather_object", _encode(obj, "allgather_object", max_bytes), -1, max_bytes)
    return [_decode(frame, r) for r, frame in enumerate(frames)]  # the first rank's error raises
