"""A frozen peer (SIGSTOP: as a rank stopped, swapped out or hung looks to the others) ends the
job within the collective timeout and a few seconds, and the rank that waited on it says which
rank stopped answering (issue 33, item 10). Rank 0 frozen is the hard case: the rendezvous store
that a failing rank reports to lives in rank 0, so every request to it goes unanswered too."""

import os
import queue
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import pytest

from tfring_dev.testing import QUIET_ENV

pytestmark = pytest.mark.multiprocess

TIMEOUT = 5  # TFRING_TIMEOUT
SLACK = 10  # what the exit may take beyond it: the failure's report, the shutdown, the launcher

LOOP = r'''
import os, sys, time
import tensorflow as tf
import tfring
tfring.init()
print("UP", tfring.rank(), os.getpid(), flush=True)
try:
    while True:
        tfring.ops.allreduce(tf.ones([1 << 14]), name="grads")
        time.sleep(0.01)
except tf.errors.UnavailableError as e:
    print("UNAVAILABLE", e.message.splitlines()[0], flush=True)
    sys.exit(1)
'''


def _gone(pid):
    """True when `pid` has exited (a zombie its parent has not reaped yet counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _lines(stream, into):
    for line in stream:
        into.put(line)
    into.put(None)


@pytest.mark.parametrize("frozen", [0, 1], ids=["rank0-the-store-host", "rank1"])
def test_a_frozen_peer_ends_the_job_within_the_timeout_naming_it(frozen):
    other = 1 - frozen
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(textwrap.dedent(LOOP))
    env = dict(os.environ, **QUIET_ENV, TFRING_TIMEOUT=str(TIMEOUT))
    proc = subprocess.Popen([sys.executable, "-m", "tfring", "run", "-np", "2", "--all-output", sys.executable, f.name],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    out, pids, seen = queue.Queue(), {}, []
    threading.Thread(target=_lines, args=(proc.stdout, out), daemon=True).start()
    try:
        start_by = time.monotonic() + 120
        while len(pids) < 2 and time.monotonic() < start_by:
            try:
                line = out.get(timeout=1)
            except queue.Empty:
                continue
            assert line is not None, "".join(seen)
            seen.append(line)
            if line.split()[1:2] == ["UP"]:
                pids[int(line.split()[2])] = int(line.split()[3])
        assert len(pids) == 2, "".join(seen)
        time.sleep(1)  # a few steps
        os.kill(pids[frozen], signal.SIGSTOP)
        stopped_at = time.monotonic()
        while not _gone(pids[other]) and time.monotonic() - stopped_at < TIMEOUT + SLACK:
            time.sleep(0.05)
        rank_took = time.monotonic() - stopped_at
        try:
            proc.wait(timeout=max(0.1, TIMEOUT + SLACK - (time.monotonic() - stopped_at)))
        except subprocess.TimeoutExpired:
            pass
        job_took = time.monotonic() - stopped_at
        time.sleep(0.5)  # the last lines
        while not out.empty():
            seen.append(out.get() or "")
        text = "".join(seen)
        assert rank_took < TIMEOUT + SLACK, f"rank {other} still running after {rank_took:.0f} s:\n{text[-3000:]}"
        assert job_took < TIMEOUT + SLACK, f"tfring run still running after {job_took:.0f} s:\n{text[-3000:]}"
        failed = [line for line in seen if line.startswith(f"[{other}] UNAVAILABLE")]
        assert failed, text[-3000:]
        assert f"rank {frozen} stopped answering for {TIMEOUT} s" in failed[0], failed[0]
        assert "(it may be stopped, swapped out or hung" in failed[0], failed[0]
        assert "datasets of different sizes" not in failed[0], failed[0]
    finally:
        os.unlink(f.name)
        for pid in pids.values():
            try:
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)
