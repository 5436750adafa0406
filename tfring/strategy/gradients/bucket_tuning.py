"""`bucket_bytes="auto"`: `fit` times a few bucket sizes over its first steps and keeps the fastest.

Buckets are cut when the train step is traced, so each size tried is a retrace of Keras' train
function (as `model.make_train_function(force=True)` does): for every candidate size the tuner
lets `WARMUP_STEPS` steps pass (the first one traces), then times `TIMED_STEPS` steps, from one
`on_train_batch_end` to the next. The candidates are the powers of two from 1 to 32 MiB smaller
than the model's gradients, plus one that holds them all. Once all are timed, one small
collective takes each candidate's slowest rank (a step is as slow as its slowest rank), every rank
picks the same fastest size, rank 0 prints the figures, and training goes on with that size. The
pick lasts for the strategy's life; a `fit` that ends first leaves the rest of the trial to the
next `fit`. Horovod's autotune tunes its fusion buffer online in the same spirit.
"""

import math
import statistics
import sys
import time

import keras
import tensorflow as tf

from tfring.ops import collectives

MiB = 1 << 20
SIZES = tuple(m * MiB for m in (1, 2, 4, 8, 16, 32))
WARMUP_STEPS = 2
TIMED_STEPS = 5


def candidates(gradient_bytes, sizes=SIZES):
    """The bucket sizes worth timing for gradients of `gradient_bytes` bytes in all.

    Args:
        gradient_bytes: the bytes of every trainable variable together.
        sizes: the sizes to choose from, ascending.

    Returns:
        The sizes below `gradient_bytes`, then the first one at or above it (a single bucket).

    Example:

    >>> candidates(5 << 20)
    [1048576, 2097152, 4194304, 8388608]
    """
    below = [s for s in sizes if s < gradient_bytes]
    return below + [s for s in sizes if s >= gradient_bytes][:1]


def _size(n):
    """4194304 -> '4 MiB', 16384 -> '16 KiB'."""
    return f"{n / MiB:g} MiB" if n >= MiB else f"{n / 1024:g} KiB"


class BucketTuner(keras.callbacks.Callback):
    """Times each candidate bucket size over a few steps of `fit` and keeps the fastest.

    `RingStrategy(bucket_bytes="auto")` makes one; `fit` adds it to its callbacks until it has
    picked (see the module docstring). `picked` is then the size in use, also in
    `strategy.bucket_bytes`.

    Args:
        extended: the strategy's `RingExtended`, whose `bucket_bytes` the next trace uses.
        rank: this process's rank (rank 0 prints the outcome).
        sizes: the sizes to choose from, ascending (`candidates` keeps those that matter).
        warmup_steps: steps after each retrace that are not timed (the first one traces).
        timed_steps: steps timed per size; their median is the size's figure.

    Example:

    >>> strategy = tfring.RingStrategy(bucket_bytes="auto")
    >>> model.fit(dataset, epochs=10)          # the first steps try 1-32 MiB
    tfring: bucket_bytes=auto picked 4 MiB (ms per step, slowest rank: 1 MiB 1096.5, 2 MiB ...)
    >>> strategy.bucket_bytes
    4194304
    """

    def __init__(self, extended, rank, sizes=SIZES, warmup_steps=WARMUP_STEPS, timed_steps=TIMED_STEPS):
        super().__init__()
        self._extended = extended
        self._rank = rank
        self._choices, self._warmup, self._timed_steps = tuple(sizes), warmup_steps, timed_steps
        self._sizes = None  # known when fit starts: they depend on the model
        self._timed = {}  # size -> median seconds per step
        self._steps, self._samples, self._last = 0, [], None
        self.picked = None

    def on_train_begin(self, logs=None):
        if self._sizes is None:
            total = sum(math.prod(v.shape) * tf.as_dtype(v.dtype).size for v in self.model.trainable_variables)
            self._sizes = candidates(total, self._choices)
            if len(self._sizes) == 1:
                self._finish(self._sizes[0], "the gradients fit in one bucket")
                return
            self._try(self._sizes[0])
        self._last = None  # the gap across calls of fit is not a step

    def on_epoch_begin(self, epoch, logs=None):
        self._last = None  # nor is the gap across epochs

    def on_train_batch_end(self, batch, logs=None):
        if self.picked is not None:
            return
        now = time.perf_counter()
        self._steps += 1
        if self._steps > self._warmup and self._last is not None:
            self._samples.append(now - self._last)
        self._last = now
        if len(self._samples) < self._timed_steps:
            return
        size = self._extended.bucket_bytes
        self._timed[size] = statistics.median(self._samples)
        rest = [s for s in self._sizes if s not in self._timed]
        if rest:
            self._try(rest[0])
        else:
            self._decide()

    def _try(self, size):
        self._extended.bucket_bytes = size
        self.model.make_train_function(force=True)
        self._steps, self._samples, self._last = 0, [], None

    def _decide(self):
        sizes = list(self._timed)
        slowest = collectives.allreduce(tf.constant([self._timed[s] for s in sizes], tf.float64), op="max")
        slowest = [float(t) for t in slowest.numpy()]
        best = sizes[min(range(len(sizes)), key=lambda i: (slowest[i], i))]
        figures = ", ".join(f"{_size(s)} {1e3 * t:.1f}" for s, t in zip(sizes, slowest))
        self._finish(best, f"ms per step, slowest rank: {figures}")

    def _finish(self, size, why):
        if size != self._extended.bucket_bytes:  # the train step was traced with another size
            self._extended.bucket_bytes = size
            self.model.make_train_function(force=True)
        self.picked = size
        if self._rank == 0:
            print(f"tfring: bucket_bytes=auto picked {_size(size)} ({why})", file=sys.stderr, flush=True)
