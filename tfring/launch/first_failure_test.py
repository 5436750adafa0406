"""Blame for a failed job: the core's lost-peer words, and which rank is named first."""

import glob
import math
import os

import pytest

from tfring.launch import first_failure
from tfring.launch.first_failure import RankEnd

CORE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "native", "cc", "core")


def _core_sources():
    return "".join(open(p).read() for p in glob.glob(os.path.join(CORE, "**", "*.cc"), recursive=True))


@pytest.mark.parametrize("phrase", first_failure.PEER_LOST)
def test_every_lost_peer_phrase_is_the_cores_own(phrase):
    # The core builds "rank " + std::to_string(peer) + " exited": each piece around N is in its source.
    sources = _core_sources()
    for piece in phrase.split("N"):
        assert piece.strip() in sources, f"{piece.strip()!r} of {phrase!r} is no longer in {CORE}"


@pytest.mark.parametrize("line", [
    "UnavailableError: tfring.allreduce 'g' failed on rank 0: lost the connection to rank 1: connection closed by peer",
    "UnavailableError: tfring.allreduce 'g' failed on rank 2: rank 1 exited or closed its connection",
    "UnavailableError: tfring.allreduce 'g' failed on rank 2: rank 1 exited",
    "UnavailableError: tfring.broadcast 'v' failed on rank 0: rank 3 stopped answering for 60 s (it may be ...)",
    "UnavailableError: tfring.allreduce 'g' failed on rank 0: the collective's time ran out while data from rank 1 "
    "was still moving (a slow link ...)",
    "DeadlineExceededError: the rendezvous store of rank 0 at 10.0.0.1:2 stopped answering (no answer in 60 s: ...)",
    "UnavailableError: ... transport was aborted after an earlier failure (first failure, reported by another rank: x)",
    "UnavailableError: rendezvous store at 10.0.0.1:2 closed the connection (rank 0 exited, or it refused ...)",
])
def test_the_cores_lost_peer_errors_read_as_consequences(line):
    assert first_failure.reads_as_consequence(["Traceback (most recent call last):", line, "\t [[{{node x}}]]"])


@pytest.mark.parametrize("line", [
    "ValueError: boom",
    "UnavailableError: cannot size shared memory '/tfring-1' (is /dev/shm full?)",
    "RuntimeError: rank 1 exploded",
])
def test_other_errors_are_causes(line):
    assert not first_failure.reads_as_consequence([line])


def _end(rank, code, seen_at, tail=(), stopped=False):
    return RankEnd(rank, code, seen_at, stopped, list(tail))


def test_the_earliest_failure_is_blamed():
    cause, others = first_failure.blame([_end(0, 1, 2.0, ["ValueError: late"]), _end(1, 3, 1.0, ["ValueError: boom"]),
                                         _end(2, 143, 3.0, stopped=True)])
    assert (cause.rank, cause.code, others) == (1, 3, [0, 2])


def test_a_lost_peer_that_exits_first_is_not_blamed():
    lost = "UnavailableError: lost the connection to rank 1: connection closed by peer"
    cause, others = first_failure.blame([_end(0, 1, 1.0, [lost]), _end(1, 1, 1.5, ["ValueError: boom"]),
                                         _end(2, 0, 0.5)])
    assert (cause.rank, others) == (1, [0])


def test_a_rank_stopped_by_the_launcher_is_blamed_only_when_nothing_else_is():
    lost = "UnavailableError: rank 1 stopped answering for 60 s"
    cause, others = first_failure.blame([_end(0, 1, 1.0, [lost]), _end(1, None, math.inf, stopped=True)])
    assert (cause.rank, others) == (0, [1])


def test_a_killed_rank_says_nothing_and_is_a_cause():
    cause, _ = first_failure.blame([_end(0, 1, 1.0, ["rank 1 exited"]), _end(1, 137, 1.0)])
    assert cause.rank == 1


def test_the_summary_is_one_line_with_the_last_error():
    tail = ["Traceback (most recent call last):", "ValueError: boom", ""]
    assert first_failure.summary("rank 1 exited with code 1", tail, [0]) == (
        "first failure: rank 1 exited with code 1 (last stderr line: ValueError: boom); stopped rank 0 because of it")
    killed = "rank 0 was killed by SIGKILL"
    assert first_failure.summary(killed, [], []) == f"first failure: {killed}"
    assert len(first_failure.last_line(["y" * 1000])) == 303


def test_a_silent_host_is_told_from_a_rank_that_ended():
    named = first_failure.silent_named
    assert named(["UnavailableError: lost the connection to rank 2: connection lost while receiving: "
                  "Connection timed out"]) == 2  # keepalive probes unanswered
    assert named(["x", "UnavailableError: tfring.allreduce failed: rank 11 stopped answering"]) == 11
    assert named(["lost the connection to rank 0: connection closed by peer"]) is None  # its rank ended
    assert named(["lost the connection to rank 0: connection lost while receiving: Connection reset by peer"]) is None
