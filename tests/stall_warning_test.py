"""A collective that waits past `TFRING_STALL_WARNING` says, on every waiting rank, which ranks
have not submitted it and what it is, repeated until the rank comes (or the timeout ends it)."""

import pytest

from tfring_dev.testing import run_job

pytestmark = pytest.mark.multiprocess

LATE = r'''
import time
import tensorflow as tf
import tfring

tfring.init()
if tfring.rank() == 2:
    time.sleep(3.5)  # a slow input pipeline, a debugger, a rank stuck in its own code
step = tf.function(lambda: tfring.ops.allreduce([tf.ones([2, 3]), tf.ones([4])], name="grads"))
out = step()
print("SUM", float(out[0][0][0]), flush=True)
'''


def test_waiting_ranks_name_the_late_rank_and_the_collective():
    proc = run_job(3, LATE, env={"TFRING_STALL_WARNING": "1"}, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("SUM 3.0") == 3, proc.stdout
    for rank in (0, 1):
        lines = [line for line in proc.stderr.splitlines()
                 if line.startswith(f"[{rank}] tfring: rank {rank} has waited")]
        assert lines, proc.stderr[-3000:]
        # At 1, 2 and 3 s (the late rank comes at about 3.5 s).
        assert 2 <= len(lines) <= 4, lines
        assert "allreduce 'grads' (2 tensors, shapes [2,3] [4]); rank 2 has not submitted it" in lines[0], lines
    assert "[2] tfring: rank 2 has waited" not in proc.stderr


def test_off_says_nothing():
    proc = run_job(3, LATE, env={"TFRING_STALL_WARNING": "0"}, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "has waited" not in proc.stderr
