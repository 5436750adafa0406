"""tf.data autotuning off for the input of a rank that has one core (or less) to itself.

When tf.data autotunes a pipeline (its default), each iterator starts a thread that re-tunes it
after a period that doubles from 10 ms up to 60 s. Keras drops the iterator at the end of every
epoch, and the iterator's destructor waits for that thread to stop. TensorFlow (seen with 2.17.1)
wakes the thread before it marks the cancellation as done (`CancellationManager` runs its
callbacks, then sets `is_cancelled`), so a thread that runs at once sees no cancellation and sleeps
out the rest of its period. With a core per rank, or less, the woken thread usually does run at
once, and every epoch ends with the process idle for up to one period: up to the epoch's own
length, or a minute. Measured on 2 cores with `benchmarks/fit_scaling.py`'s model (fit calls of
2 short epochs): 2 ranks pinned to a core each trained at about 3,950 images/s with autotuning and
7,100-8,000 without; 2 unpinned ranks at 4,000-4,900 and 6,300-7,100.

With one core there is nothing for autotuning to spread work over: without it, `AUTOTUNE`
parallelism is the core count (1) and `prefetch(AUTOTUNE)` sizes its buffer as it goes.
"""

import logging
import os

import tensorflow as tf

_log = logging.getLogger("tfring")


def cores_per_rank(local_size, affinity=None, host_cores=None):
    """How many cores this rank has to itself, at most.

    Args:
        local_size: how many ranks of the job run on this host.
        affinity: the cores this process may use (default: `os.sched_getaffinity(0)`).
        host_cores: the host's cores (default: `os.cpu_count()`).

    Returns:
        The fewer of the cores in its affinity and the host's cores split among its ranks.

    Example:

    >>> cores_per_rank(2, affinity={0, 1}, host_cores=2)
    1.0
    """
    affinity = os.sched_getaffinity(0) if affinity is None else affinity
    host_cores = (os.cpu_count() or len(affinity)) if host_cores is None else host_cores
    return min(float(len(affinity)), host_cores / max(local_size, 1))


def for_rank(dataset, local_size):
    """`dataset` with tf.data autotuning off when this rank has one core or less to itself.

    A dataset whose options say whether to autotune (`options.autotune.enabled` set) is left as
    it is, so setting it to True keeps autotuning.

    Args:
        dataset: the `tf.data.Dataset` this rank will iterate.
        local_size: how many ranks of the job run on this host.

    Returns:
        `dataset`, or `dataset.with_options(...)` with `autotune.enabled = False`.

    Example:

    >>> for_rank(tf.data.Dataset.range(8).batch(4), local_size=2)
    """
    if dataset.options().autotune.enabled is not None or cores_per_rank(local_size) > 1:
        return dataset
    _log.debug("tfring: tf.data autotuning off for this rank's input (one core or less per rank)")
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)
