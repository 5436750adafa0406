"""Enough inter-op threads for gradient buckets to overlap the backward pass, where they can.

A bucket's allreduce starts once its gradients exist, but TensorFlow runs a step's ops on its
inter-op threads, and with one thread (its default for a process that may use one core, as a
rank pinned with `taskset` or `tfring run --bind-to core`) it runs the backward pass depth first:
the weight gradients wait until the input gradients have run all the way down to the first layer,
so every bucket starts after the backward pass and nothing overlaps (measured on 2 emulated
hosts: benchmarks/step_time.py, 1.55x the target with one thread against 0.96x with two).

That only pays in a job across hosts, where a bucket spends its time on the network. On one
host a rank's share of the ring (the copies and sums) runs on its own core, so there is nothing
to overlap, and a second thread on that core only competes with the first: in probes of one
process pinned to a core (plain Keras and a 1-rank RingStrategy alike), two threads made the
step 2-6 % slower.
"""

import logging
import os

import tensorflow as tf

_log = logging.getLogger("tfring")
_VARIABLE = "TF_NUM_INTEROP_THREADS"


def ensure_for_overlap(bucket_bytes, size, local_size, cores=None):
    """Asks TensorFlow for 2 inter-op threads where it would use 1, buckets are on and the job spans
    hosts.

    Leaves a count the user chose (`tf.config.threading.set_inter_op_parallelism_threads`, or
    `TF_NUM_INTEROP_THREADS`) alone, and logs a warning when that count is 1, or when TensorFlow
    has already started and can no longer be changed.

    Args:
        bucket_bytes: the strategy's setting; 0 (no buckets) changes nothing.
        size: the number of ranks in the job.
        local_size: the number of ranks on this host; equal to `size`, nothing changes.
        cores: the cores this process may use (default: its CPU affinity).

    Returns:
        True when the count was raised to 2.

    Example:

    >>> ensure_for_overlap(25 << 20, size=2, local_size=1)
    """
    if not bucket_bytes or local_size >= size:
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
