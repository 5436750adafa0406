"""`supervision.Supervisor` in an elastic job that goes on in place: which ranks it keeps after a
failure, which it ends, whom it blames, and how a kept rank's output follows its new number."""

import queue
import signal

import pytest

from tfring.launch import hosts
from tfring.launch import membership
from tfring.launch import output
from tfring.launch import supervision


class FakeRank:
    """A rank whose stderr lines and exit the test decides."""

    def __init__(self, r, lines=(), code=None):
        self.slot = hosts.Slot(f"h{r}", r, 0, 1)
        self.code = code
        self.signals = []
        self.forced = False
        self.stderr = queue.Queue()
        for line in lines:
            self.stderr.put(line.encode() + b"\n")
        if code is not None:
            self.end_output()  # (it has ended)

    def poll(self):
        return self.code

    def signal(self, signum):
        self.signals.append(signum)
        if self.code is None:
            self.code = 128 + signum

    def kill(self):
        self.signal(signal.SIGKILL)
        self.end_output()

    def force(self):
        self.forced = True
        self.kill()

    def wait(self, timeout=None):
        return self.code

    def describe_failure(self, code):
        return f"rank {self.slot.rank} exited with code {code}"

    def say(self, line):
        self.stderr.put(line.encode() + b"\n")

    def pump_stdout(self, take):
        pass

    def pump_stderr(self, take):
        while (line := self.stderr.get()) is not None:
            take(line)

    def end_output(self):
        self.stderr.put(None)


WAITING = f"tfring: rank R: lost a peer (rank 2 exited); {membership.REFORM_WAIT}"


def _job(ranks, in_place=True):
    ranks_by_number = {}
    supervisor = supervision.Supervisor(ranks_by_number, output.JobOutput(all_output=True), in_place=in_place)
    for r, rank in enumerate(ranks):
        ranks_by_number[r] = rank
        supervisor.follow(r, rank.pump_stdout, rank.pump_stderr)
    return supervisor


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setattr(supervision, "CAUSE_GRACE_SECONDS", 0.2)
    monkeypatch.setattr(supervision, "REFORM_SAY_SECONDS", 0.5)
    monkeypatch.setattr(supervision, "KILL_GRACE_SECONDS", 0.2)
    monkeypatch.setattr(supervision, "STDERR_EOF_SECONDS", 0.1)


def test_the_ranks_that_wait_are_kept_and_the_failed_one_is_blamed():
    left = [FakeRank(r, [membership.CAN_REFORM, WAITING]) for r in (0, 1)]
    dead = FakeRank(2, [membership.CAN_REFORM], code=137)
    supervisor = _job(left + [dead])
    assert supervisor.wait() == 137
    assert sorted(supervisor.kept) == [0, 1] and all(rank.signals == [] for rank in left)
    assert supervisor.cause[:2] == (2, "rank 2 exited with code 137")
    supervisor.end_kept()  # (when the job starts again instead)
    assert all(rank.signals[:1] == [signal.SIGTERM] for rank in left)
    for rank in left:
        rank.end_output()


def test_without_every_rank_saying_it_can_go_on_in_place_none_is_kept():
    left = [FakeRank(0, [membership.CAN_REFORM, WAITING]), FakeRank(1, [WAITING])]
    supervisor = _job(left + [FakeRank(2, [membership.CAN_REFORM], code=137)])
    assert supervisor.wait() == 137
    assert supervisor.kept is None and all(rank.signals[:1] == [signal.SIGTERM] for rank in left)
    for rank in left:
        rank.end_output()


def test_a_rank_the_others_lost_that_never_exits_is_ended_and_named():
    # A host cut off: its ssh may not notice for minutes, but the others said they lost it.
    left = [FakeRank(r, [membership.CAN_REFORM, WAITING]) for r in (0, 1)]
    silent = FakeRank(2, [membership.CAN_REFORM])
    supervisor = _job(left + [silent])
    assert supervisor.wait() == 128 + signal.SIGKILL
    assert silent.forced and sorted(supervisor.kept) == [0, 1]
    assert supervisor.cause[1] == "rank 2 on host h2 stopped answering (the other ranks lost it)"
    for rank in left:
        rank.end_output()


def test_a_kept_rank_is_watched_under_its_new_number(capfdbinary):
    left = [FakeRank(r, [membership.CAN_REFORM, WAITING]) for r in (0, 2, 3)]
    supervisor = _job(left[:1] + [FakeRank(1, [membership.CAN_REFORM], code=137)] + left[1:])
    supervisor.wait()
    kept = supervisor.kept
    ranks = {}
    after = supervision.Supervisor(ranks, output.JobOutput(all_output=True), in_place=True)
    for new, old in enumerate(sorted(kept)):
        after.take_over(new, kept[old])
    left[2].say("hello from the old rank 3")
    for rank in left:
        rank.code = 0
        rank.end_output()
    assert after.wait() == 0
    assert b"[2] hello from the old rank 3" in capfdbinary.readouterr().err


def test_told_to_grow_ranks_that_wait_at_their_commit_are_all_kept_with_their_random_state():
    said = membership.can_reform_line(0xabc)
    ranks = [FakeRank(r, [said]) for r in (0, 1)]
    supervisor = _job(ranks)
    supervisor.interrupt = lambda: "the hosts now offer 3 ranks where the job runs 2"
    for rank in ranks:  # (told by `notify`, they stop at their commit and wait)
        rank.notify = lambda rank=rank: rank.say(f"tfring: rank R: the hosts changed; {membership.REFORM_WAIT}")
    assert supervisor.wait() == 0
    assert supervisor.grown and sorted(supervisor.kept) == [0, 1]
    assert all(kept.random_state == "abc" for kept in supervisor.kept.values())
    assert all(rank.signals == [] for rank in ranks)
    for rank in ranks:
        rank.end_output()
