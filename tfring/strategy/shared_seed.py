"""One random state on every rank: TensorFlow's global seed, NumPy's and Python's global generators.

Under RingStrategy every rank reads each global batch and keeps its own rows, so every rank must
see the same data in the same order:

- Keras shuffles NumPy input (`fit(x, y)`, `shuffle=True` by default) with TensorFlow's random
  ops, and a `tf.data` shuffle without a seed also draws from them. Without a global seed each
  process would shuffle differently, and the ranks' rows would overlap and miss (silently:
  training still runs). So `RingStrategy()` sets TensorFlow's global seed when the script has not
  set one (`keras.utils.set_random_seed` or `tf.random.set_seed`, called with the same value on
  every rank, keeps working as before): to TensorFlow's own default graph seed, the one a process
  without a global seed gives every op that has a seed of its own. So a pipeline seeded by its
  ops (`shuffle(256, seed=3)`) gives the job the batches it gives one process, and an unseeded
  one is the same on every rank (and, like PyTorch's `DistributedSampler` with its default seed,
  from run to run).
- Scripts also make or split their data with NumPy's and Python's global generators
  (`np.random.permutation` for a train/validation split, `np.random.rand`, `random.shuffle`),
  often unseeded. Every rank takes rank 0's state of both, seeded or not, so data made after
  `RingStrategy()` is the same everywhere. Data made before it cannot be mended here: `fit`,
  `evaluate` and `predict` compare their NumPy inputs across ranks instead (`input_digest`).
  A generator of the script's own (`np.random.default_rng()`) is not global: seed it.

A rank that joins a running elastic job (`tfring.elastic`) cannot take rank 0's state from the
job's start: it keeps its own, and `state_digest` lets the job check, as the rank joins, that it is
the one the other ranks took (it is, when the script seeds it: `keras.utils.set_random_seed`).
"""

import random

import numpy as np
import tensorflow as tf
from tensorflow.python.eager import context
from tensorflow.python.framework import random_seed

from tfring.ops import collectives
from tfring.strategy import rank_agreement

_MT_WORDS = 624  # the Mersenne Twister's state words, in NumPy's legacy generator and Python's


def _float_bits(value):
    return int(np.array(value, np.float64).view(np.int64))


def _bits_float(bits):
    return float(np.array(bits, np.int64).view(np.float64))


def _numpy_state():
    """NumPy's legacy global state as int64s: 624 words, position, has_gauss, cached gaussian."""
    _, keys, pos, has_gauss, gauss = np.random.get_state()
    return [int(k) for k in keys] + [pos, has_gauss, _float_bits(gauss)]


def _set_numpy_state(words):
    keys = np.array(words[:_MT_WORDS], np.uint32)
    pos, has_gauss, gauss = words[_MT_WORDS:]
    np.random.set_state(("MT19937", keys, pos, has_gauss, _bits_float(gauss)))


def _python_state():
    """Python's `random` state as int64s: version, 625 words (the last is the position), whether a
    gaussian is cached, and its bits."""
    version, words, gauss = random.getstate()
    return [version, *words, gauss is not None, _float_bits(gauss or 0.0)]


def _set_python_state(words):
    version, *state, has_gauss, gauss = words
    random.setstate((version, tuple(state), _bits_float(gauss) if has_gauss else None))


def agree_on_random_state(rank, size, joining=False):
    """Gives every rank rank 0's NumPy and Python global random state, and TensorFlow's default
    graph seed as the global seed when none is set. Every rank must call it (one broadcast).

    Args:
        rank: this process's rank.
        size: the number of ranks.
        joining: this rank joins a running job later (`tfring.runtime.joining()`): it keeps its
            own NumPy and Python state.

    Returns:
        The TensorFlow global seed now in effect (None on one rank with no seed set).

    Example:

    >>> agree_on_random_state(tfring.rank(), tfring.size())
    """
    if size < 2:
        return context.global_seed()
    numpy_words, python_words = _numpy_state(), _python_state()
    offer = numpy_words + python_words
    if rank != 0 and not joining:  # (a joining rank runs alone: the broadcast hands back its offer)
        offer = [0] * len(offer)
    # Every rank takes part; NumPy's position (<= 624) and Python's version keep the sizes fixed.
    agreed = [int(v) for v in collectives.broadcast(tf.constant(offer, tf.int64), root_rank=0).numpy()]
    _set_numpy_state(agreed[:len(numpy_words)])
    _set_python_state(agreed[len(numpy_words):])
    chosen = context.global_seed()
    if chosen is None:
        tf.random.set_seed(random_seed.DEFAULT_GRAPH_SEED)
        return random_seed.DEFAULT_GRAPH_SEED
    return chosen


def state_digest():
    """A digest of the global random state now: NumPy's, Python's and TensorFlow's global seed.

    Returns:
        An int (63 bits), equal on two processes whose states are equal.

    Example:

    >>> keras.utils.set_random_seed(1); a = state_digest()
    >>> keras.utils.set_random_seed(1); a == state_digest()
    True
    """
    words = _numpy_state() + _python_state() + [context.global_seed() or 0]
    return rank_agreement.digest(np.array(words, np.int64).tobytes())
