"""`tfring.run(fn)`: return values by rank, exceptions re-raised with the rank's traceback, failures and timeouts."""

import os
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
