"""Process sets through `tfring.ops` on 3 ranks: every collective runs over a set's ranks only
(eagerly and in a `tf.function` with buckets), a set of one rank is an identity, a rank outside a
set is refused, ranks that pass different sets all fail saying so, and removed sets are gone; a rank
killed inside a set's collective fails the others fast, naming it.
Horovod's own process-set tests run in tests/horovod_suite_test.py.
"""

import time

import pytest

from tfring_dev.testing import rank_lines
from tfring_dev.testing import run_job

pytestmark = pytest.mark.multiprocess

SCRIPT = r'''
import tensorflow as tf
import tfring
from tfring import ops

r = tfring.rank()
try:
    ops.add_process_set([0, 1] if r == 0 else [0, 2])
except ValueError as e:
    print("MISMATCH", "rank 0 passed [0, 1], rank 1 [0, 2]" in str(e))
evens, odd = ops.add_process_set([2, 0]), ops.add_process_set([1])
try:
    if r in (0, 2):
        x = tf.constant([float(r + 1)] * 3)
        print("SUM", ops.allreduce(x, process_set=evens).numpy()[0])
        print("MEAN", ops.allreduce(x, op="mean", process_set=evens).numpy()[0])
        print("BROADCAST", ops.broadcast(x, root_rank=2, process_set=evens).numpy()[0])
        print("GATHER", ops.allgather(tf.constant([r]), process_set=evens).numpy().tolist())
        rows = ops.reducescatter(tf.constant([[1.0], [2.0]]) * (r + 1), process_set=evens)
        print("SCATTER", rows.numpy().ravel().tolist())
        print("ALLTOALL", ops.alltoall(tf.constant([r, r + 10]), process_set=evens)[0].numpy().tolist())

        @tf.function
        def step(a, b):
            return ops.allreduce_buckets([[a], [b]], process_set=evens)

        out = step(tf.ones([4]) * r, tf.ones([2]))
        print("BUCKETS", out[0][0].numpy()[0], out[1][0].numpy()[0])
        print("OBJECTS", tfring.allgather_object({"r": r}, process_set=evens))
    else:
        print("ALONE", ops.allreduce(tf.constant([5.0]), process_set=odd).numpy()[0])
        try:
            ops.allreduce(tf.constant([1.0]), process_set=evens)
        except tf.errors.InvalidArgumentError as e:
            print("OUTSIDE", "rank 1 is not in process set" in str(e))
    print("WHOLE", ops.allreduce(tf.constant([1.0])).numpy()[0])
finally:
    print("REMOVED", ops.remove_process_set(evens), ops.remove_process_set(odd))
try:
    ops.process_set_ranks(evens)
except ValueError as e:
    print("GONE", "no process set" in str(e))
'''


def test_collectives_run_over_a_process_sets_ranks_only(warm):
    job = warm.run_job(3, SCRIPT, pool="horovod")
    assert job.returncode == 0, job.stderr[-3000:] + job.stdout[-3000:]
    common = ["MISMATCH True"]
    end = ["WHOLE 3.0", "REMOVED True True", "GONE True"]
    evens = {0: ["SCATTER [4.0]", "ALLTOALL [0, 2]"], 2: ["SCATTER [8.0]", "ALLTOALL [10, 12]"]}
    for r in (0, 2):
        assert rank_lines(job.stdout, r) == common + ["SUM 4.0", "MEAN 2.0", "BROADCAST 3.0", "GATHER [0, 2]"] + \
            evens[r] + ["BUCKETS 2.0 2.0", "OBJECTS [{'r': 0}, {'r': 2}]"] + end, job.stdout[-3000:]
    assert rank_lines(job.stdout, 1) == common + ["ALONE 5.0", "OUTSIDE True"] + end, job.stdout[-3000:]


KILLED_IN_A_SET = r'''
import os, signal, sys, threading, time
import tensorflow as tf
import tfring
from tfring import ops

rank = tfring.rank()
evens = ops.add_process_set([0, 2])
ops.allreduce(tf.ones([4]))                      # everyone is up
if rank == 2:
    # Die with SIGKILL while inside a stream of the set's large collectives.
    threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
else:
    signal.signal(signal.SIGTERM, lambda *a: None)   # stay alive to report what we saw
start = time.monotonic()
try:
    if rank == 1:
        ops.allreduce(tf.ones([4]))              # the whole job's: ranks 0 and 2 never come
    else:
        big = tf.ones([4_000_000])
        for _ in range(100000):
            ops.allreduce(big, process_set=evens)
    print("NO ERROR")
except tf.errors.UnavailableError as e:
    print(f"UNAVAILABLE after {time.monotonic() - start:.1f}s: {e.message.splitlines()[0]}", flush=True)
if rank == 0:
    time.sleep(3)  # rank 1 must learn of rank 2, not of rank 0 ending first (the launcher ends us)
'''


def test_a_rank_killed_inside_a_sets_collective_fails_the_others_fast_naming_it():
    # The set's other member fails in its set's collective, the rank outside the set in the whole
    # job's; both well inside the timeout, and the launcher names the killed rank.
    start = time.monotonic()
    proc = run_job(3, KILLED_IN_A_SET, env={"TFRING_TIMEOUT": "60"}, timeout=120)
    assert proc.returncode == 128 + 9, (proc.returncode, proc.stderr[-2000:])
    assert time.monotonic() - start < 60
    member = [l for l in rank_lines(proc.stdout, 0) if l.startswith("UNAVAILABLE")]
    assert member and "process set 1" in member[0] and "rank 2" in member[0], (member, proc.stderr[-2000:])
    outside = [l for l in rank_lines(proc.stdout, 1) if l.startswith("UNAVAILABLE")]
    assert outside and "rank 2" in outside[0], (outside, proc.stdout[-2000:])
    assert "rank 2 was killed by SIGKILL" in proc.stderr


REMOVED_WHILE_IN_USE = r'''
import time
import tensorflow as tf
import tfring
from tfring import ops

rank = tfring.rank()
evens = ops.add_process_set([0, 2])
ops.allreduce(tf.ones([4]))                      # everyone is up
start = time.monotonic()
try:
    if rank == 2:
        ops.allreduce(tf.ones([4]), process_set=evens)   # while rank 0 removes the set
    else:
        ops.remove_process_set(evens)
    print("NO ERROR")
except (tf.errors.OpError, ValueError, RuntimeError, ConnectionError) as e:
    text = getattr(e, "message", str(e)).replace("\n", " ")
    print(f"FAILED after {time.monotonic() - start:.1f}s: {type(e).__name__}: {text[:600]}")
'''


def test_removing_a_set_while_a_member_is_inside_its_collective_fails_at_once_naming_it():
    # Rank 0 removes the set {0, 2} while rank 2 runs the set's allreduce: both fail at once, saying
    # the set is being removed while in use, instead of waiting for the timeout and blaming each other.
    start = time.monotonic()
    proc = run_job(3, REMOVED_WHILE_IN_USE, env={"TFRING_TIMEOUT": "60"}, timeout=120)
    assert time.monotonic() - start < 40, proc.stderr[-2000:]
    for rank in (0, 2):
        failed = [l for l in rank_lines(proc.stdout, rank) if l.startswith("FAILED")]
        assert failed and "remove_process_set" in failed[0] and "process set 1" in failed[0], (
            rank, proc.stdout[-3000:], proc.stderr[-2000:])
