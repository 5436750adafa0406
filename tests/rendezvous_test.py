"""Joining a job: a rank that never starts, and a process without the job secret."""

import os
import subprocess
import sys
import time

import pytest

from tfring.launch.addresses import free_port

pytestmark = pytest.mark.multiprocess

INIT = "import tfring\ntry:\n    tfring.init()\n    print('JOINED', tfring.size())\nexcept Exception as e:\n    print(type(e).__name__, e)\n"



def _rank(rank, size, port, secret, timeout="3"):
    env = dict(os.environ, TFRING_RANK=str(rank), TFRING_SIZE=str(size), TFRING_STORE_ADDR=f"127.0.0.1:{port}",
               TFRING_SECRET=secret, TFRING_JOB_ID=f"rv{port}", TFRING_RENDEZVOUS_TIMEOUT=timeout,
               TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.Popen([sys.executable, "-c", INIT], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def test_rank_that_never_starts_fails_rendezvous_after_its_timeout():
    start = time.monotonic()
    p = _rank(0, 2, free_port(), "s")
    out, err = p.communicate(timeout=120)
    took = time.monotonic() - start
    assert "TimeoutError" in out and "rank 1" in out, (out, err)
    assert took < 60


def test_process_without_the_secret_is_refused_and_logged():
    port = free_port()
    good = _rank(0, 2, port, "right", timeout="6")
    time.sleep(1.0)
    bad = _rank(1, 2, port, "wrong", timeout="6")
    bad_out, _ = bad.communicate(timeout=120)
    good_out, good_err = good.communicate(timeout=120)
    assert "JOINED" not in bad_out and "store" in bad_out, bad_out
    assert "JOINED" not in good_out
    assert "refused a connection from 127.0.0.1:" in good_err and "bad or missing job secret" in good_err


def test_ring_strategy_says_why_it_cannot_start():
    code = ("import tfring\ntry:\n    tfring.RingStrategy()\nexcept RuntimeError as e:\n    print('ERR', e)\n")
    env = dict(os.environ, TFRING_RANK="0", TFRING_SIZE="2", TFRING_STORE_ADDR=f"127.0.0.1:{free_port()}",
               TFRING_SECRET="s", TFRING_JOB_ID="rs", TFRING_RENDEZVOUS_TIMEOUT="2", TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert "ERR RingStrategy could not start tfring" in proc.stdout and "rank 1" in proc.stdout, proc.stdout


def test_waiting_for_a_missing_rank_is_visible_every_ten_seconds():
    # Under mpirun or srun a rank that died before rendezvous leaves no launcher to stop the job:
    # the others must say what they wait for instead of hanging silently for the whole timeout.
    p = _rank(0, 3, free_port(), "s", timeout="13")
    out, err = p.communicate(timeout=120)
    assert "TimeoutError" in out and "ranks 1, 2" in out and "TFRING_RENDEZVOUS_TIMEOUT" in out, out
    waits = [line for line in err.splitlines() if "is waiting for" in line]
    assert waits and "rank 0 is waiting for ranks 1, 2 to join (10 s of 13 s)" in waits[0], err


def test_waiting_for_a_missing_rank0_is_visible_every_ten_seconds():
    p = _rank(1, 2, free_port(), "s", timeout="12")
    out, err = p.communicate(timeout=120)
    assert "TimeoutError" in out and "cannot reach the store of rank 0" in out, out
    assert "still waiting for the rendezvous store of rank 0 at 127.0.0.1:" in err, err
