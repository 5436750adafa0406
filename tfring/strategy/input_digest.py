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
copied, and a per-rank dataset is a choice `input_sharding` documents.

A sample can miss a difference in the elements it does not read; it catches arrays drawn from
different random states or read from different files, the mistakes it is for.
"""

import functools
import hashlib
import inspect

import numpy as np
import tensorflow as tf

from tfring.ops import collectives
from tfring.strategy import keras_patches
from tfring.strategy.ring_model import ring_strategy_of

SAMPLED_ELEMENTS = 1 << 16
_INPUTS = {"fit": ("x", "y", "sample_weight", "validation_data"), "evaluate": ("x", "y", "sample_weight"),
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
    h = hashlib.blake2b(digest_size=8)
    h.update(f"{array.shape}|{array.dtype.str}|".encode())
    if array.size:
        count = min(array.size, SAMPLED_ELEMENTS)
        sample = array.flat[np.linspace(0, array.size - 1, count).astype(np.int64)]
        h.update(repr(sample.tolist()).encode() if sample.dtype.hasobject else np.ascontiguousarray(sample).tobytes())
    return int.from_bytes(h.digest(), "little") >> 1


def _gather(values):
    """Every rank's int64 `values` (one row per rank, all of one length)."""
    return collectives.allgather(tf.constant([values], tf.int64)).numpy()


def _describe(call, labels, everyone):
    """The error for ranks whose digests differ from rank 0's; `everyone[r]` is rank r's count of
    arrays followed by their digests, `labels` this rank's names for them."""
    differing = [r for r in range(1, len(everyone)) if not np.array_equal(everyone[r], everyone[0])]
    first = everyone[differing[0]]
    if first[0] != everyone[0][0]:
        what = "the number of NumPy arrays passed"
    else:
        names = [label for k, label in enumerate(labels) if first[k + 1] != everyone[0][k + 1]]
        what = "the NumPy input " + ", ".join(f"`{n}`" for n in names)
    ranks = ", ".join(str(r) for r in differing)
    return (f"tfring: {what} of {call}() differs between ranks (rank {ranks} against rank 0; compared by shape, "
            f"dtype and a sample of {SAMPLED_ELEMENTS} elements per array). Under RingStrategy every rank must pass "
            f"the same arrays: each keeps its share of every global batch. The usual cause is data made with "
            f"unseeded randomness (np.random, random) before tfring.RingStrategy() was created: create the "
            f"strategy first (it gives every rank rank 0's random state) or seed the generator; or data read "
            f"from a file that differs per rank.")


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
    labels, digests = [], []
    for name, value in inputs.items():
        for label, array in _leaves(value, name):
            labels.append(label)
            digests.append(array_digest(array))
    whole = array_digest(np.array(digests, np.int64))
    summary = _gather([whole, len(digests)])
    if (summary == summary[0]).all():
        return
    longest = int(summary[:, 1].max())  # every rank knows it: the second allgather has one length
    everyone = _gather([len(digests)] + digests + [0] * (longest - len(digests)))
    everyone = [row[:row[0] + 1] for row in everyone]
    raise ValueError(_describe(call, labels, everyone))


def _checked(original):
    call = original.__name__
    signature = inspect.signature(original)

    @functools.wraps(original)
    def checked(self, *args, **kwargs):
        if ring_strategy_of(self) is not None:
            bound = signature.bind(self, *args, **kwargs).arguments
            check_same_on_every_rank(call, {name: bound.get(name) for name in _INPUTS[call]})
        return original(self, *args, **kwargs)

    return checked


PATCHES = [keras_patches.Patch("keras.Model", name, _checked, "NumPy inputs must be the same on every rank")
           for name in _INPUTS]


def install():
    """Wraps `keras.Model.fit`, `evaluate` and `predict` with the check. Idempotent.

    Example:

    >>> install()
    """
    keras_patches.apply(PATCHES)
