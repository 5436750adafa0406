"""What `compression=` may name, and the hook and state each gives."""

import tensorflow as tf

from tfring.compression import adasum
from tfring.compression import default_hooks

WIRE_TYPES = {"fp16": tf.float16, "bf16": tf.bfloat16}
NAMES = (None, "none", "adasum") + tuple(WIRE_TYPES)


def is_compressor(compression):
    """True for a compressor object (`tfring.compression.PowerSGD(...)` and the like): a hook
    (`compressor(state, bucket)`) that makes its own state (`compressor.new_state()`)."""
    return callable(compression) and callable(getattr(compression, "new_state", None))


def for_compression(compression, where="compression"):
    """The hook and state `compression=` registers.

    Args:
        compression: None, "none", "fp16", "bf16", "adasum" (not compression: the gradients
            combined by Adasum, `adasum.adasum_hook`) or a compressor object (`PowerSGD(...)`).
        where: the caller's name, for the error.

    Returns:
        `(state, hook)`.

    Raises:
        ValueError: anything else.

    Example:

    >>> for_compression("fp16")
    (tf.float16, cast_hook)
    """
    if is_compressor(compression):
        return compression.new_state(), compression
    if isinstance(compression, (str, type(None))) and compression in NAMES:
        if compression == "adasum":
            return None, adasum.adasum_hook
        wire = WIRE_TYPES.get(compression)
        return (None, default_hooks.allreduce_hook) if wire is None else (wire, default_hooks.cast_hook)
    raise ValueError(f"{where}: compression must be None, 'fp16', 'bf16', 'adasum' or a compressor such as "
                     f"tfring.compression.PowerSGD(rank=4), got {compression!r}")
