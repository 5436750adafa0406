"""NumPy inputs of `fit`, `evaluate` and `predict` must be the same arrays on every rank.

Under RingStrategy `fit(x, y, batch_size=B)` means one global batch of B rows, of which each rank
keeps its share: that is one process's training only when every rank holds the same `x` and `y`.
A script that made them with unseeded randomness before `RingStrategy()` existed (NumPy's or
Python's global generator; after it, `shared_seed` makes them agree), or read them from a file per
rank, would train on rows no single process sees, and nothing would say so.

So before each call, every rank digests its arrays (shape, dtype and an evenly strided sample of
`SAMPLED_ELEMENTS` elements each: the cost does not grow with the array) and the ranks compare
the digests in one allgather of two numbers. When they differ every rank fails with the same
`ValueError`, naming the input (`x`, `y['label']`, `validation_data[0]`, ...), the ranks that
differ and the likely cause. Datasets and generators are not digested: they are sharded, not
copied, and a per-rank dataset is a choice `input.share` documents. (`keras_wraps.model_calls`
calls `check_same_on_every_rank` before each of the three calls.)

A sample can miss a difference in the elements it does not read; it catches arrays drawn from
different random states or read from different files, the mistakes it is for.
"""

import numpy as np
import tensorflow as tf

from tfring.strategy import rank_agreement

SAMPLED_ELEMENTS = 1 << 16
INPUTS = {"fit": ("x", "y", "sample_weight", "validation_data"), "evaluate": ("x", "y", "sample_weight"),
           "predict": ("x",)}


def _array(leaf):
    """`leaf` as a NumPy array without copying it, or None when it is not array data."""
    if isinstance(leaf, np.ndarray):
        return leaf
    if isinstance(leaf, tf.Tensor) and hasattr(leaf, "numpy"):  # an eager tensor
        return leaf.numpy()
    if hasattr(leaf, "__array__") and not isinstance(leaf, (tf.data.Dataset, tf.Variable)):
        return np.asarray(leaf)  # pandas and the like (their values are usually a view)
    return None


def _leaves(value, label):
    """(label, array) for every array in a nest of dicts, lists and tuples, in a fixed order."""
    if isinstance(value, dict):
        for key in sorted(value, key=str):
            yield from _leaves(value[key], f"{label}[{key!r}]")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _leaves(item, f"{label}[{i}]")
    else:
        array = _array(value)
        if array is not None:
            yield label, array


def array_digest(array):
    """A 63-bit digest of an array's shape, dtype and an evenly strided sample of its elements.

    Args:
        array: a NumPy array, of any size and layout (a strided view is not copied).

    Returns:
        A non-negative int; equal arrays give equal digests.

    Example:

    >>> array_digest(np.zeros((3, 2))) == array_digest(np.zeros((3, 2)))
    True
    """
    parts = [f"{array.shape}|{array.dtype.str}|".encode()]
    if array.size:
        count = min(array.size, SAMPLED_ELEMENTS)
        sample = array.flat[np.linspace(0, array.size - 1, count).astype(np.int64)]
        parts.append(repr(sample.tolist()).encode() if sample.dtype.hasobject else np.ascontiguousarray(sample).tobytes())
    return rank_agreement.digest(b"".join(parts))


def check_same_on_every_rank(call, inputs):
    """Fails on every rank when the ranks' NumPy arrays in `inputs` differ. Every rank must call it.

    Args:
        call: the Keras method, for the message (`"fit"`).
        inputs: a dict of argument name -> value (arrays, nests of them, or anything else).

    Raises:
        ValueError: the arrays (or their number) differ between ranks; the message names the input.

    Example:

    >>> check_same_on_every_rank("fit", {"x": x, "y": y})
    """
    leaves = [leaf for name, value in inputs.items() for leaf in _leaves(value, name)]
    found = rank_agreement.differences([label for label, _ in leaves], [array_digest(a) for _, a in leaves])
    if found is None:
        return
    ranks, names = found
    what = ("the number of NumPy arrays passed" if names is None else
            "the NumPy input " + ", ".join(f"`{n}`" for n in names))
    raise ValueError(
        f"tfring: {what} of {call}() differs between ranks (rank {', '.join(map(str, ranks))} against rank 0; "
        f"compared by shape, dtype and a sample of {SAMPLED_ELEMENTS} elements per array). Under RingStrategy "
        f"every rank must pass the same arrays: each keeps its share of every global batch. The usual cause is "
        f"data made with unseeded randomness (np.random, random) before tfring.RingStrategy() was created: "
        f"create the strategy first (it gives every rank rank 0's random state) or seed the generator; or data "
        f"read from a file that differs per rank.")
