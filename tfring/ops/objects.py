"""Small Python values across ranks: `broadcast_object` and `allgather_object`.

Eager only (they return Python values), like Horovod's. Values travel as JSON (never pickle: nothing received is executed), so they are what JSON holds:
dicts with string keys, lists, strings, numbers, booleans and None (tuples come back as lists).
A value that cannot be encoded, or is larger than `max_bytes`, fails on every rank with the same
error: the rank that holds it still takes part in the collective, sending the error instead.
"""

import json

import numpy as np
import tensorflow as tf

from tfring import checks
from tfring.ops import collectives

DEFAULT_MAX_BYTES = 16 << 20
_ERROR_KEY = "__tfring_object_error__"


def _encode(obj, what, max_bytes):
    try:
        data = json.dumps(obj, allow_nan=True, separators=(",", ":")).encode()
    except (TypeError, ValueError) as e:
        return json.dumps({_ERROR_KEY: f"{what}: the value is not JSON-serialisable ({e})"}).encode()
    if len(data) > max_bytes:
        return json.dumps({_ERROR_KEY: f"{what}: the value takes {len(data)} bytes as JSON, over the "
                                       f"limit of {max_bytes} (max_bytes)"}).encode()
    return data


def _decode(data, rank):
    value = json.loads(bytes(data).decode())
    if isinstance(value, dict) and _ERROR_KEY in value:
        raise ValueError(f"{value[_ERROR_KEY]} (on rank {rank})")
    return value


def _gather_bytes(data):
    """Every rank's bytes, as a list in rank order (one allgather of sizes, one of bytes)."""
    if not tf.executing_eagerly():
        raise RuntimeError("tfring's object collectives (broadcast_object, allgather_object) run eagerly only: "
                           "they return Python values. Call them outside tf.function and TF1 graph mode "
                           "(in a graph, broadcast tensors with tfring.ops.broadcast)")
    mine = tf.constant(np.frombuffer(data, dtype=np.uint8))
    sizes = collectives.allgather(tf.constant([len(data)], tf.int64)).numpy()
    gathered = collectives.allgather(mine).numpy().tobytes()
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    return [gathered[offsets[r]:offsets[r + 1]] for r in range(len(sizes))]


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
        ValueError: on every rank, when the root's value is not JSON-serialisable or too large.

    Example:

    >>> config = tfring.broadcast_object({"lr": 0.1, "run": run_name})
    """
    from tfring import runtime

    root_rank = checks.number("broadcast_object", "root_rank", root_rank, integer=True, at_least=0,
                              below=runtime.size())
    data = _encode(obj, "broadcast_object", max_bytes) if runtime.rank() == root_rank else b""
    return _decode(_gather_bytes(data)[root_rank], root_rank)


def allgather_object(obj, max_bytes=DEFAULT_MAX_BYTES):
    """Returns a list of every rank's `obj`, in rank order (JSON values: see the module docstring).

    Args:
        obj: this rank's value.
        max_bytes: the largest JSON encoding accepted per rank.

    Returns:
        A list of `size()` values.

    Raises:
        ValueError: on every rank, when some rank's value is not JSON-serialisable or too large.

    Example:

    >>> counts = tfring.allgather_object(len(my_files))
    """
    parts = _gather_bytes(_encode(obj, "allgather_object", max_bytes))
    return [_decode(part, rank) for rank, part in enumerate(parts)]
