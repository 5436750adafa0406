"""Elastic jobs (`tfring run --min-np`): the discovery script's hosts, cool-downs, the restart loop's
decisions (with a fake job and clock), and whole `tfring run` jobs of plain processes."""

import os
import subprocess
import sys
import time

import pytest

from tfring.launch import elastic
from tfring.launch.hosts import Host


def _script(tmp_path, body, name="discover.sh"):
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o700)
    return str(path)


def test_discovery_reads_horovods_host_lines(tmp_path):
    script = _script(tmp_path, "echo 'node1:4'\necho '# a comment'\necho ''\necho 'node2   # one slot'\n")
    assert elastic.discover(script) == [Host("node1", 4), Host("node2", 1)]
    assert elastic.discover(_script(tmp_path, "true\n", "none.sh")) == []  # no host now: not an error


@pytest.mark.parametrize("body,words", [
    ("echo 'node1:four'\n", "line 1: the slots of 'node1' must be a whole number"),
    ("echo 'node1:2'\necho '-oProxy:1'\n", "line 2: '-oProxy' is not a host name"),
    ("echo node1:1\necho node1:2\n", "'node1' is listed twice"),
    ("echo broken >&2; exit 4\n", "exited with code 4: broken"),
    ("sleep 5\n", "did not finish within 0.5 s"),
])
def test_a_bad_discovery_script_is_named_with_what_is_wrong(tmp_path, body, words):
    script = _script(tmp_path, body)
    with pytest.raises(ValueError, match="--host-discovery-script") as error:
        elastic.discover(script, timeout=0.5)
    assert words in str(error.value)


def test_a_discovery_script_that_cannot_run_is_named(tmp_path):
    with pytest.raises(ValueError, match="cannot run"):
        elastic.discover(str(tmp_path / "missing.sh"))


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_a_host_that_fails_again_is_kept_out_twice_as_long_up_to_the_most():
    clock = Clock()
    kept = elastic.Cooldowns(10, 25, clock=clock)
    assert [kept.fail("a"), kept.fail("a"), kept.fail("a")] == [10, 20, 25]
    assert kept.out("a") and not kept.out("b")
    clock.sleep(25)
    assert not kept.out("a")


class FakeJob:
    """Each start fails on the host given for it (None: the start ends well)."""

    def __init__(self, failing_hosts, clock=None):
        self.failing_hosts = list(failing_hosts)
        self.clock = clock
        self.starts = []
        self.kept = []  # the `kept` each start was given

    def __call__(self, hosts, size, restart, interrupt, kept=None):
        self.starts.append(([h.name for h in hosts], size, restart))
        self.kept.append(kept)
        host = self.failing_hosts.pop(0)
        if host == "fall back":  # (the new ranks could not join the kept ones: all were ended)
            return elastic.Ending(0, grown=True, fell_back=True)
        if host in ("grow", "grow in place"):  # runs until the hosts offer more
            while not interrupt():
                self.clock.sleep(1)
            return elastic.Ending(0, grown=True, kept=["r0"] if host == "grow in place" else None)
        return elastic.Ending(0) if host is None else elastic.Ending(7, host, f"rank 1 on host {host} exited with code 7")


def _elastic(job, hosts, clock, **options):
    options = elastic.ElasticOptions(**{"cooldown": (10, 40), **options})
    return elastic.ElasticJob(job, hosts, None, options, clock=clock, sleep=clock.sleep)


def test_the_job_starts_again_without_the_failed_host_and_takes_it_back_after_its_cooldown(capsys):
    clock, hosts = Clock(), [Host("a", 2), Host("b", 2)]
    job = FakeJob(["b", "a", None])
    assert _elastic(job, hosts, clock, min_np=2, max_np=4).run() == 0
    # b fails: 2 ranks on a; a fails: b is still out (10 s) and a too: the job waits for slots.
    assert job.starts[:2] == [(["a", "b"], 4, 0), (["a"], 2, 1)]
    assert job.starts[2][2] == 2 and len(job.starts[2][0]) >= 1
    said = capsys.readouterr().err
    assert "host b kept out for 10 s; starting the job again (restart 1 of at most 3)" in said
    assert "the job ended well after 2 failures and 0 resizes: 1) rank 1 on host b exited with code 7 (host b); 2)" in said


def test_a_host_back_from_its_cooldown_grows_the_job_at_the_next_look(capsys):
    clock, hosts = Clock(), [Host("a", 1), Host("b", 1)]
    job = FakeJob(["b", "grow", None], clock)
    assert _elastic(job, hosts, clock, max_restarts=1).run() == 0
    assert [(names, size) for names, size, _ in job.starts] == [(["a", "b"], 2), (["a"], 1), (["a", "b"], 2)]
    assert [start for _, _, start in job.starts] == [0, 1, 2]  # TFRING_RESTART counts every start
    assert "the job ended well after 1 failure and 1 resize: 1) rank 1 on host b" in capsys.readouterr().err


def test_a_rank_that_only_lost_its_peer_keeps_no_host_out(capsys):
    clock = Clock()
    ends = [elastic.Ending(1, "a", "rank 0 on host a exited with code 1", lost_peer=True), elastic.Ending(0)]
    starts = []

    def job(hosts, size, restart, interrupt, kept=None):
        starts.append(size)
        return ends.pop(0)

    assert _elastic(job, [Host("a", 1), Host("b", 1)], clock).run() == 0
    assert starts == [2, 2]  # a was not kept out
    assert "no host kept out (the first failure lost a peer); starting the job again" in capsys.readouterr().err


def test_max_np_caps_the_size_and_max_restarts_ends_the_job_naming_every_failure(capsys):
    clock = Clock()
    job = FakeJob(["a", "a", "a"])
    code = _elastic(job, [Host("a", 8)], clock, max_np=3, max_restarts=2, cooldown=(0, 0)).run()
    assert code == 7
    assert [size for _, size, _ in job.starts] == [3, 3, 3]
    said = capsys.readouterr().err
    assert "the job failed 3 times, and --max-restarts 2 allows no more: 1) rank 1 on host a" in said
    assert "3) rank 1 on host a exited with code 7 (host a)" in said


def test_below_min_np_the_job_waits_its_timeout_then_fails_saying_how_many_slots_and_since_when():
    clock = Clock()
    job = FakeJob(["b"])
    runner = _elastic(job, [Host("a", 1), Host("b", 1)], clock, min_np=2, elastic_timeout=5, cooldown=(60, 60))
    with pytest.raises(RuntimeError, match=r"1 slots of the --min-np 2 needed since \d\d:\d\d:\d\d "
                                           r"\(--elastic-timeout 5 s\); kept out after failing: b"):
        runner.run()
    assert len(job.starts) == 1 and clock.now >= 1005


def test_a_discovery_script_that_fails_while_the_job_waits_is_retried_then_named(tmp_path):
    clock = Clock()
    script = _script(tmp_path, "exit 9\n")
    runner = _elastic(FakeJob([]), None, clock, discovery_script=script, elastic_timeout=4)
    with pytest.raises(RuntimeError, match="0 slots of the --min-np 1 .* exited with code 9"):
        runner.run()


@pytest.mark.parametrize("options,words", [
    (dict(min_np=0), "--min-np must be at least 1"),
    (dict(min_np=3, max_np=2), "--max-np 2 is below --min-np 3"),
    (dict(max_restarts=-1), "--max-restarts must be 0 or more"),
    (dict(cooldown=(5, 1)), "--blacklist-cooldown-range needs 0 <= MIN <= MAX"),
])
def test_bad_elastic_options_are_named(options, words):
    with pytest.raises(ValueError, match=words):
        elastic.ElasticOptions(**options).check()


# Whole jobs: `tfring run` with the elastic flags, plain processes.
FLAKY = r'''
import os, sys, time
rank, size, restart = (int(os.environ[k]) for k in ("TFRING_RANK", "TFRING_SIZE", "TFRING_RESTART"))
print(f"rank {rank} of {size}, restart {restart}", flush=True)
if os.environ.get("GROW") and size == 1 and restart == 0:
    with open(os.environ["HOSTS"], "w") as f:  # the host offers a second slot now
        f.write("localhost:2\n")
    time.sleep(60)  # until the launcher ends it to start the job again on both
if rank == 1 and restart < int(os.environ["FAIL_TIMES"]):
    with open(os.environ["HOSTS"], "w") as f:  # the host now offers one slot
        f.write("localhost:1\n")
    sys.exit(5)
time.sleep(0.2)
'''


def _elastic_run(tmp_path, args, fail_times, timeout=60, slots=2, **env):
    (tmp_path / "flaky.py").write_text(FLAKY)
    (tmp_path / "hosts").write_text(f"localhost:{slots}\n")
    script = _script(tmp_path, f"cat {tmp_path / 'hosts'}\n")
    env = dict(os.environ, FAIL_TIMES=str(fail_times), HOSTS=str(tmp_path / "hosts"), **env)
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "tfring", "run", "--all-output", "--host-discovery-script", script,
                           "--blacklist-cooldown-range", "0.1", "0.1", *args, sys.executable, str(tmp_path / "flaky.py")],
                          capture_output=True, text=True, timeout=timeout, env=env)
    return proc, time.monotonic() - start


@pytest.mark.multiprocess
def test_a_job_that_loses_a_slot_starts_again_smaller_and_ends_well(tmp_path):
    proc, _ = _elastic_run(tmp_path, ["--min-np", "1"], fail_times=1)
    assert proc.returncode == 0, proc.stderr
    assert "[1] rank 1 of 2, restart 0" in proc.stdout
    assert "[0] rank 0 of 1, restart 1" in proc.stdout  # renumbered on what is left
    assert "the job ended well after 1 failure and 0 resizes: 1) rank 1 exited with code 5 (host localhost)" in proc.stderr


@pytest.mark.multiprocess
def test_an_elastic_job_out_of_restarts_or_of_slots_fails_clearly(tmp_path):
    proc, _ = _elastic_run(tmp_path, ["--min-np", "1", "--max-restarts", "0"], fail_times=1)
    assert proc.returncode == 5, proc.stderr
    assert "the job failed 1 times, and --max-restarts 0 allows no more: 1) rank 1 exited with code 5" in proc.stderr
    proc, seconds = _elastic_run(tmp_path, ["--min-np", "2", "--elastic-timeout", "3"], fail_times=1)
    assert proc.returncode == 1, proc.stderr
    assert "tfring run: 1 slots of the --min-np 2 needed since" in proc.stderr
    assert seconds < 30


@pytest.mark.multiprocess
def test_a_job_grows_when_the_hosts_offer_more_slots(tmp_path):
    proc, seconds = _elastic_run(tmp_path, ["--min-np", "1", "--max-np", "2"], fail_times=0, slots=1, GROW="1")
    assert proc.returncode == 0, proc.stderr
    assert "[0] rank 0 of 1, restart 0" in proc.stdout
    assert "[1] rank 1 of 2, restart 1" in proc.stdout
    assert "the hosts now offer 2 ranks where the job runs 1: starting it again on them, once the ranks stop" in proc.stderr
    assert "ending the ranks: they do not commit (tfring.elastic)" in proc.stderr  # (3 s to say they do)
    assert "the job ended well after 0 failures and 1 resize" in proc.stderr
    assert seconds < 30  # not the 60 s the first membership would sleep


def test_ranks_waiting_to_grow_in_place_go_into_the_next_start_with_the_hosts_there_now(capsys):
    clock, hosts = Clock(), [Host("a", 1), Host("b", 1)]
    job = FakeJob(["b", "grow in place", None], clock)
    assert _elastic(job, hosts, clock, max_restarts=1).run() == 0
    assert [(names, size) for names, size, _ in job.starts] == [(["a", "b"], 2), (["a"], 1), (["a", "b"], 2)]
    assert job.kept == [None, None, ["r0"]]
    assert "the job ended well after 1 failure and 1 resize" in capsys.readouterr().err


def test_a_growth_in_place_that_falls_back_to_starting_again_counts_once(capsys):
    clock, hosts = Clock(), [Host("a", 1), Host("b", 1)]
    job = FakeJob(["b", "grow in place", "fall back", None], clock)
    assert _elastic(job, hosts, clock, max_restarts=1).run() == 0
    assert job.kept[3] is None and job.starts[3][:2] == (["a", "b"], 2)
    assert "the job ended well after 1 failure and 1 resize" in capsys.readouterr().err
