"""Enough inter-op threads for gradient buckets to overlap the backward pass.

A bucket's allreduce starts once its gradients exist, but TensorFlow runs a step's ops on its
inter-op threads, and with one thread (its default for a process that may use one core, as a
rank pinned with `taskset` or `tfring run --bind-to core`) it runs the backward pass depth first:
the weight gradients wait until the input gradients have run all the way down to the first layer,
so every bucket starts after the backward pass and nothing overlaps (measured:
benchmarks/step_time.py, 1.55x the target with one thread against 0.96x with two). Two threads
on one core cost no compute and let the weight gradients, and so the buckets, go as they become
ready.
"""

import logging
import os

import tensorflow as tf

_log = logging.getLogger("tfring")
_VARIABLE = "TF_NUM_INTEROP_THREADS"


def ensure_for_overlap(bucket_bytes, cores=None):
    """Asks TensorFlow for 2 inter-op threads where it would use 1 and buckets are on.

    Leaves a count the user chose (`tf.config.threading.set_inter_op_parallelism_threads`, or
    `TF_NUM_INTEROP_THREADS`) alone, and logs a warning when that count is 1, or when TensorFlow
    has already started and can no longer be changed.

    Args:
        bucket_bytes: the strategy's setting; 0 (no buckets) changes nothing.
        cores: the cores this process may use (default: its CPU affinity).

    Returns:
        True when the count was raised to 2.

    Example:

    >>> ensure_for_overlap(25 << 20)
    """
    if not bucket_bytes:
        return False
    chosen = tf.config.threading.get_inter_op_parallelism_threads() or int(os.environ.get(_VARIABLE, "0") or 0)
    cores = len(os.sched_getaffinity(0)) if cores is None else cores
    if chosen == 1 or (not chosen and cores == 1):
        if chosen == 1:
            _log.warning("tfring: TensorFlow runs this rank's ops on one inter-op thread, so gradient buckets "
                         "cannot overlap the backward pass; give it 2 (%s=2)", _VARIABLE)
            return False
        try:
            tf.config.threading.set_inter_op_parallelism_threads(2)
            return True
        except RuntimeError:
            _log.warning("tfring: this rank may use one core and TensorFlow has already started with one "
                         "inter-op thread, so gradient buckets cannot overlap the backward pass; set %s=2, "
                         "or create RingStrategy before running any TensorFlow op", _VARIABLE)
    return False
