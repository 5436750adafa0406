"""Two inter-op threads for a rank on one core in a job across hosts, so gradient buckets can
overlap the backward pass. Each case runs in a fresh process: the count can only be set before
TensorFlow starts."""

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.multiprocess

CASE = r'''
import sys
import tensorflow as tf
from tfring.strategy import inter_op_threads
if sys.argv[3] == "started":
    tf.constant(1.0) + 1.0  # TensorFlow's runtime starts with its thread pools
size, local_size = (int(n) for n in sys.argv[4].split("/"))
raised = inter_op_threads.ensure_for_overlap(int(sys.argv[1]), size, local_size, cores=int(sys.argv[2]))
print("RESULT", raised, tf.config.threading.get_inter_op_parallelism_threads())
'''


def _case(bucket_bytes, cores, started=False, ranks=(2, 1), **env):
    """`ranks`: (ranks in the job, ranks on this host); the default is a job across 2 hosts."""
    full = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **env)
    proc = subprocess.run([sys.executable, "-c", CASE, str(bucket_bytes), str(cores), "started" if started else "-",
                           "%d/%d" % ranks],
                          env=full, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.split("RESULT ")[1].strip(), proc.stderr


def test_a_rank_on_one_core_gets_two_threads():
    assert _case(4 << 20, cores=1)[0] == "True 2"


@pytest.mark.parametrize("ranks", [(1, 1), (2, 2), (4, 4)])
def test_nothing_changes_in_a_job_on_one_host(ranks):
    # One rank has nothing to overlap; on one host a rank's share of the ring (copies and sums)
    # runs on its own core anyway, and a second thread there only competes with the first.
    result, err = _case(4 << 20, cores=1, ranks=ranks)
    assert result == "False 0" and "inter-op" not in err


@pytest.mark.parametrize("bucket_bytes, cores", [(0, 1), (4 << 20, 2)])
def test_nothing_changes_without_buckets_or_with_several_cores(bucket_bytes, cores):
    assert _case(bucket_bytes, cores)[0] == "False 0"


def test_a_count_the_user_chose_is_kept_with_a_warning_when_it_is_one():
    result, err = _case(4 << 20, cores=1, TF_NUM_INTEROP_THREADS="1")
    assert result == "False 0"
    assert "on one inter-op thread, so gradient buckets cannot overlap" in err
    result, err = _case(4 << 20, cores=1, TF_NUM_INTEROP_THREADS="3")
    assert result == "False 0" and "inter-op" not in err


def test_too_late_says_what_to_do():
    result, err = _case(4 << 20, cores=1, started=True)
    assert result == "False 0"
    assert "TF_NUM_INTEROP_THREADS=2, or create RingStrategy before running any TensorFlow op" in err
