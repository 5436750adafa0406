"""`tfring.run(fn)`: return values by rank, exceptions re-raised with the rank's traceback, failures and timeouts."""

import os
import pickle
import signal
import subprocess
import sys
import time

import pytest

from tfring.launch.function_launcher import run
from tfring.launch.function_launcher import RankFailedError, RemoteTraceback

pytestmark = pytest.mark.multiprocess


def _rank():
    return int(os.environ["TFRING_RANK"])


def test_returns_every_ranks_value_in_rank_order():
    offset = 100  # a closure: cloudpickle carries it
    result = run(lambda scale, plus=0: (_rank() * scale + offset + plus, os.environ["TFRING_SIZE"]),
                        np=3, args=(10,), kwargs={"plus": 1})
    assert result == [(101, "3"), (111, "3"), (121, "3")]


def _fail_on_rank_1():
    if _rank() == 1:
        raise KeyError("no such column 'label'")
    time.sleep(30)  # stopped by tfring run when rank 1 fails


def test_a_ranks_exception_is_raised_here_with_its_traceback():
    start = time.monotonic()
    with pytest.raises(KeyError, match="no such column") as info:
        run(_fail_on_rank_1, np=2, env={"TF_CPP_MIN_LOG_LEVEL": "2"})
    assert time.monotonic() - start < 25  # the sleeping rank was stopped, not waited for
    cause = info.value.__cause__
    assert isinstance(cause, RemoteTraceback)
    assert "(rank 1 of 2)" in str(cause) and "_fail_on_rank_1" in str(cause)


def test_a_rank_that_dies_without_an_exception():
    with pytest.raises(RankFailedError, match="rank 0 of 2 ended without a result .*code 7") as info:
        run(lambda: os._exit(7) if _rank() == 0 else time.sleep(30), np=2)
    assert info.value.returncode == 7


def test_timeout_stops_the_job(tmp_path):
    marker = tmp_path / "pids"

    def slow():
        with open(marker, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(60)

    with pytest.raises(TimeoutError, match="did not finish within 3 s"):
        run(slow, np=2, timeout=3)
    deadline = time.monotonic() + 10
    pids = [int(p) for p in marker.read_text().split()]
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids), "ranks outlived the launcher"


def _alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def test_bad_np():
    with pytest.raises(ValueError, match="np must be at least 1"):
        run(print, np=0)


class NeedsTwoArgs(Exception):
    def __init__(self, a, b):  # pickles, but does not unpickle with its args
        super().__init__(f"{a}/{b}")


def test_an_exception_that_cannot_be_rebuilt_still_says_what_it_was():
    def fail():
        raise NeedsTwoArgs("x", "y")

    with pytest.raises(RuntimeError, match="NeedsTwoArgs: x/y"):
        run(fail, np=1)


def test_a_value_of_a_class_defined_here_comes_back():
    class Point:  # a local class: only cloudpickle can carry it back
        def __init__(self, x):
            self.x = x

    assert [p.x for p in run(lambda: Point(_rank()), np=2)] == [0, 1]


def test_runs_on_this_host_inside_an_lsf_allocation():
    # An allocation of other hosts must not send the ranks there (the call's directory is private to this host).
    assert run(_rank, np=2, env={"LSB_MCPU_HOSTS": "elsewhere-1 2 elsewhere-2 2"}) == [0, 1]


def _gone(pid, within=10):
    """Whether `pid` has ended (a zombie counts as ended) within `within` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.1)
    return False


def _kill_quietly(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _start_sleep_and_return_its_pid():
    return subprocess.Popen(["sleep", "300"]).pid  # never waited for: it outlives the rank


def test_a_process_a_rank_started_ends_with_the_job(capsys):
    start = time.monotonic()
    pids = run(_start_sleep_and_return_its_pid, np=2)
    try:
        assert all(_gone(p, within=2) for p in pids), "a rank's child outlived the job"
        assert time.monotonic() - start < 25
        assert "rank 0 left 1 process running" in capsys.readouterr().err
    finally:
        _kill_quietly(pids)


def _fork(child_fails):
    """Forks; the child (ignoring SIGTERM, so the job's end does not stop it first) ends its call
    after the rank process has, with a value or an exception of its own."""
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(1)
        if child_fails:
            raise ValueError("the forked child's exception")
        return "the forked child's value"
    return "the rank's value"


@pytest.mark.parametrize("child_fails", [False, True], ids=["child-returns", "child-raises"])
def test_only_the_rank_process_reports_its_result(child_fails):
    assert run(_fork, np=1, args=(child_fails,)) == ["the rank's value"]


def test_a_result_that_cannot_be_pickled_names_the_rank():
    import threading

    with pytest.raises(pickle.PicklingError, match=r"rank 1's result could not be pickled: .*_thread.lock"):
        run(lambda: threading.Lock() if _rank() == 1 else 0, np=2)


def test_a_result_that_cannot_be_unpickled_here_names_the_rank(tmp_path):
    (tmp_path / "tfring_only_in_the_ranks.py").write_text("class Value:\n    pass\n")

    def make():
        import tfring_only_in_the_ranks

        return tfring_only_in_the_ranks.Value()

    with pytest.raises(pickle.UnpicklingError,
                       match="rank 0's result could not be unpickled in the caller: .*tfring_only_in_the_ranks"):
        run(make, np=1, env={"PYTHONPATH": str(tmp_path)})  # the ranks import it; this process cannot


def test_ranks_start_without_a_runpy_warning(capfd):
    assert run(_rank, np=2) == [0, 1]
    assert "RuntimeWarning" not in capfd.readouterr().err


# A caller (a notebook kernel, say) that runs a job whose ranks each start a `sleep`, writing the pids
# of the launcher, the rank and the sleep to a file.
CALLER = """
import os, subprocess, sys, time
import tfring

def train(pids):
    sleep = subprocess.Popen(["sleep", "300"])
    with open(pids, "a") as f:
        f.write(f"{os.getppid()} {os.getpid()} {sleep.pid}\\n")
    time.sleep(120)

tfring.run(train, np=2, args=(sys.argv[1],))
"""


def test_the_job_ends_with_a_killed_caller(tmp_path):
    pids_file, temp = tmp_path / "pids", tmp_path / "tmp"
    temp.mkdir()
    caller = subprocess.Popen([sys.executable, "-c", CALLER, str(pids_file)], env={**os.environ, "TMPDIR": str(temp)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    pids = []
    try:
        deadline = time.monotonic() + 60
        while len(pids) < 5 and time.monotonic() < deadline:
            time.sleep(0.2)
            lines = pids_file.read_text().splitlines() if pids_file.exists() else []
            pids = sorted({int(p) for line in lines[:2] for p in line.split()})
        assert len(pids) == 5, "the job did not start"  # one launcher, two ranks, two sleeps
        assert list(temp.glob("tfring-run-*")), "the call's directory is not where this test looks"
        caller.kill()
        caller.wait(timeout=10)
        assert all(_gone(p, within=10) for p in pids), "the job outlived its caller"
        deadline = time.monotonic() + 5
        while list(temp.glob("tfring-run-*")) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not list(temp.glob("tfring-run-*")), "the call's directory was left behind"
    finally:
        try:
            os.killpg(caller.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _kill_quietly(pids)
