"""One TensorFlow random seed for every rank, unless the script chose one.

Under RingStrategy every rank reads each global batch and keeps its own rows, so every rank must
draw the same batches: Keras shuffles NumPy input (`fit(x, y)`, `shuffle=True` by default) with
TensorFlow's random ops, and a `tf.data` shuffle without a seed also draws from them. Without a
global seed each process would shuffle differently, and the ranks' rows would overlap and miss
(silently: training still runs). So `RingStrategy()` sets TensorFlow's global seed to a value
drawn on rank 0 and broadcast, when the script has not set one (`keras.utils.set_random_seed` or
`tf.random.set_seed`, called with the same value on every rank, keeps working as before).
"""

import secrets

import tensorflow as tf
from tensorflow.python.eager import context

from tfring.ops import collectives


def agree_on_global_seed(rank, size):
    """Sets one global seed on every rank when none is set. Every rank must call it.

    Args:
        rank: this process's rank.
        size: the number of ranks.

    Returns:
        The seed now in effect (None on one rank with no seed set).

    Example:

    >>> agree_on_global_seed(tfring.rank(), tfring.size())
    """
    if size < 2:
        return context.global_seed()
    offer = tf.constant(secrets.randbelow(2**31) if rank == 0 else 0, tf.int64)
    seed = int(collectives.broadcast(offer, root_rank=0).numpy())  # every rank takes part
    chosen = context.global_seed()
    if chosen is None:
        tf.random.set_seed(seed)
        return seed
    return chosen
