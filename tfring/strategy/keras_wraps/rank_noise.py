"""Each rank draws its own noise: Dropout and other random layers get independent masks per rank.

Keras layers draw their randomness from a `keras.random.SeedGenerator`, whose state is a variable
created in the strategy's scope, so it starts from rank 0's value on every rank (as every variable
does, for identical initial weights). Left alone, row i of every rank's share would draw the same
dropout mask: one process with the global batch draws an independent mask for every row, so the
ranks' noise would be correlated in a way one process's never is.

`keras_wraps.install` wraps `SeedGenerator.next` (public Keras API) so that under a job of several ranks the
seed it hands out has the rank folded in (`tf.random.experimental.stateless_fold_in`): the
generators' state, and so every variable and checkpoint, stays the same on every rank; only the
draws differ. Initial weights are unaffected: every variable takes rank 0's initial value.

Random layers are therefore the one place where a job's results are not those of one process: the
masks are independent, as one process's are, but not the same masks.
"""

import functools

import tensorflow as tf

from tfring import runtime
from tfring.strategy import keras_patches


def _folded(original):
    @functools.wraps(original)
    def next(self, ordered=True):
        seed = original(self, ordered)
        if not runtime.is_initialized() or runtime.size() < 2:
            return seed
        seed = tf.convert_to_tensor(seed)
        return tf.random.experimental.stateless_fold_in(seed, tf.constant(runtime.rank(), seed.dtype))

    return next


PATCHES = [keras_patches.Patch("keras.random.SeedGenerator", "next", _folded,
                               "each rank draws independent noise (the rank is folded into every seed)",
                               parameters=("self", "ordered"))]
