"""How `tfring run` watches the ranks of a job, ends the job, and says how it ended.

The launcher polls every rank until all have ended, it got SIGINT/SIGTERM, or a failure is clear.
When one rank exits non-zero (or the connection to its host is lost), the others are stopped
(SIGTERM, then SIGKILL after a grace period: all gone within 5 s) and the launcher exits with the
code of the rank that failed first, naming it (`first_failure`) in one last line. A rank on another
host that the failed ranks say they lost, and that has not ended 3 s later (its host cut off), is
not waited for: its ssh is killed at once. However the job
ends, what a rank on this host left running in its process group is ended with it (SIGTERM, then
SIGKILL after the grace); after a job that succeeded the launcher names those processes, one line
per rank, and still exits 0. After Ctrl-C the launcher says so once, and hides what the ranks
write to stderr from then on (their KeyboardInterrupt tracebacks) unless `--all-output`.
When an elastic job may grow (`interrupt`), the ranks are told (`notify`); ranks that commit
(`tfring.elastic`) say so on stderr (`GROW_ACK`) and stop together at their next commit (exit code
`LEFT_AT_COMMIT`). Ranks that have not said so within `GROW_ACK_SECONDS`, or not stopped within
`GROW_COMMIT_SECONDS`, are ended.
In an elastic job that goes on in place (`in_place`, and every rank said it can:
`membership.CAN_REFORM`), a failure does not end the ranks still running that say they wait for
the next membership (`membership.REFORM_WAIT`, within `REFORM_SAY_SECONDS`): they are handed over
(`kept`, `hand_over`) to the next membership's supervisor (`take_over`), their output relabelled
with their new numbers. Likewise, told that the job may grow, such ranks stop at their next commit
and wait (`membership.GROWS_IN_PLACE`): once all do, they are handed over and the job `grown`, for
`launcher.Job.grow` to start the new ranks beside them. When ranks say they lost a peer and no rank has exited
`CAUSE_GRACE_SECONDS` later (a host cut off), the ranks that said nothing are the lost ones: their
ssh is killed, and they are named as having stopped answering.
"""

import math
import signal
import subprocess
import sys
import threading
import time

from tfring.launch import first_failure
from tfring.launch import local_rank
from tfring.launch import remote_rank
from tfring.launch import variables

KILL_GRACE_SECONDS = 4.0
POLL_SECONDS = 0.05
# How long a failure that reads as a lost peer waits for the rank that caused it to fail too (a
# rank that raised may exit after its neighbour noticed its closed connection).
CAUSE_GRACE_SECONDS = 3.0
# How long the launcher waits for a rank's last stderr lines once it has exited.
STDERR_EOF_SECONDS = 1.0
# Ranks told that their elastic job may grow have GROW_ACK_SECONDS to say that they commit
# (tfring.elastic; a script that does not, with BackupAndRestore, is ended then), and then
# GROW_COMMIT_SECONDS to stop together at their next commit before the launcher ends them.
GROW_ACK_SECONDS = 3.0
GROW_COMMIT_SECONDS = 600.0
# In an elastic job that goes on in place: after a failure, the ranks still running have
# REFORM_SAY_SECONDS to say that they wait for the next membership (`membership.REFORM_WAIT`; a
# rank learns that it lost a peer when a collective fails: at once for a peer that exited, within
# the connections' keepalive for a host cut off), or the job starts again. A rank waits at most
# REFORM_WAIT_SECONDS for its membership (`membership.REFORM_SECONDS`).
REFORM_SAY_SECONDS = 10.0
REFORM_WAIT_SECONDS = 120.0
# A job that grows in place: the new ranks have GROW_JOIN_SECONDS to start and wait at
# `tfring.elastic.run` (within the kept ranks' REFORM_WAIT_SECONDS).
GROW_JOIN_SECONDS = 90.0


class Relay:
    """Where one stream of a rank goes; changed when the rank is renumbered (a job that goes on in
    place).

    Args:
        take: a function that takes a line (bytes).
    """

    def __init__(self, take):
        self.take = take

    def __call__(self, line):
        self.take(line)


class Kept:
    """A rank that goes on in the job's next membership, handed from one `Supervisor` to the next.

    Args:
        rank: its `LocalRank` or `RemoteRank`.
        relays: its (stdout, stderr) `Relay`s.
        threads: the threads that read them.
        random_state: the random state digest it said (`membership.can_reform_line`), or None.
    """

    def __init__(self, rank, relays, threads, random_state=None):
        self.rank, self.relays, self.threads, self.random_state = rank, relays, threads, random_state


class Supervisor:
    """Watches the ranks of a job until it ends, stops what is left of it, and says how it ended.

    Args:
        ranks: rank -> `local_rank.LocalRank` or `remote_rank.RemoteRank`: the job's own dict,
            which the job fills as it starts the ranks.
        output: the job's `output.JobOutput`.

    Example:

    >>> supervisor = Supervisor(ranks, output.JobOutput())
    >>> signal.signal(signal.SIGINT, supervisor.record_signal)
    >>> supervisor.follow(0, rank.pump_stdout, rank.pump_stderr)   # as each rank starts
    >>> supervisor.wait()
    0
    """

    def __init__(self, ranks, output, interrupt=None, in_place=False):
        self.ranks = ranks
        self.in_place = in_place  # after a failure, ranks that wait for the next membership are kept
        self.kept = None  # after such a failure: the `Kept` ranks, by rank
        self._reform_seen = None  # when a rank first said it lost a peer and waits (in place)
        self._unanswering = set()  # ranks ended because the others lost them and they said nothing
        self._followed = {}  # rank -> its (stdout, stderr) Relays, and the threads reading them
        self.output = output
        self.interrupt = interrupt  # called at each poll: a reason to end a running job, or None
        self.interrupted = None  # the reason the job was ended by `interrupt`
        self.grown = False  # whether the job ended for `interrupted`'s reason (not by itself, nor by a failure)
        self._notified_at = None  # when the ranks were told that the job may grow
        self.exits = {}  # rank -> (exit code, time.monotonic() when the exit was first seen)
        self.signalled = None  # SIGINT/SIGTERM received by the launcher (the handler only records it)
        self._threads = []
        self._consequences = {}  # rank -> whether its stderr reads as a lost peer
        self.cause = None  # after a failure: (the rank blamed, the line naming it, whether it only lost a peer)

    def record_signal(self, signum, _frame):
        """A signal handler: notes the launcher's first SIGINT/SIGTERM in `signalled`."""
        # Only noted here: the main thread passes it on (writing to ssh from a handler could
        # interrupt a write the main thread is in the middle of).
        if self.signalled is None:
            self.signalled = signum

    def follow(self, r, pump_stdout, pump_stderr):
        """Copies rank `r`'s output in two threads, until the job's end waits for them.

        Args:
            r: the rank.
            pump_stdout, pump_stderr: functions that copy one of its streams, line by line, to
                the function they are given (`output.pump` bound to a stream, or `RemoteRank`'s).
        """
        relays = Relay(self.output.stream(r, stdout=True)), Relay(self.output.stream(r, stdout=False))
        self._followed[r] = relays, (self._thread(pump_stdout, relays[0]), self._thread(pump_stderr, relays[1]))

    def hand_over(self, r):
        """Lets rank `r` go on into the next membership: this supervisor no longer watches nor ends it.

        Returns:
            A `Kept` for the next supervisor's `take_over`.
        """
        relays, threads = self._followed.pop(r)
        self._threads = [t for t in self._threads if t not in threads]
        return Kept(self.ranks.pop(r), relays, threads, self.output.random_states.get(r))

    def take_over(self, r, kept):
        """Watches a rank handed over by the previous membership's supervisor, now as rank `r`."""
        self.ranks[r] = kept.rank
        for relay, stdout in zip(kept.relays, (True, False)):
            relay.take = self.output.stream(r, stdout=stdout)
        self._followed[r] = kept.relays, kept.threads
        self._threads.extend(kept.threads)

    def _thread(self, target, *args):
        t = threading.Thread(target=target, args=args, daemon=True)
        t.start()
        self._threads.append(t)
        return t

    def signal_all(self, signum):
        """Passes `signum` to every rank still running, on every host."""
        for rank in self.ranks.values():
            rank.signal(signum)

    def _poll_all(self):
        """Polls every rank, noting when each exit was first seen; True once all have ended."""
        now = time.monotonic()
        for r, rank in self.ranks.items():
            if r not in self.exits and (code := rank.poll()) is not None:
                self.exits[r] = (code, now)
        return len(self.exits) == len(self.ranks)

    def _wait_all(self, seconds, silent=()):
        """Polls until every rank but `silent` ones has ended, at most `seconds`."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not self._poll_all():
            if silent and all(r in self.exits for r in self.ranks if r not in silent):
                return
            time.sleep(POLL_SECONDS)

    def terminate(self, silent=()):
        """SIGTERM to every rank, SIGKILL to those still alive after the grace period.

        Args:
            silent: ranks on other hosts not to wait for: ranks the others lost, still not ended
                `CAUSE_GRACE_SECONDS` after that (their host cut off): their ssh is killed at once.
        """
        self.signal_all(signal.SIGTERM)
        self._wait_all(KILL_GRACE_SECONDS, silent)
        self._kill_all(silent)

    def _kill_all(self, silent=()):
        """SIGKILL to every rank (a remote one through its closed channel), then ssh itself."""
        for rank in self.ranks.values():
            rank.kill()
        self._wait_all(remote_rank.SSH_EXIT_GRACE, silent)
        for rank in self.ranks.values():
            rank.force()
            try:
                rank.wait(remote_rank.SSH_EXIT_GRACE)
            except subprocess.TimeoutExpired:
                pass  # stuck in the kernel: nothing more a signal can do

    def _stderr_tail(self, r):
        """Rank `r`'s last stderr lines, once they have arrived (a helper it left running may hold
        its stderr open: then what came within `STDERR_EOF_SECONDS`)."""
        if r in self._followed:
            self._followed[r][1][1].join(timeout=STDERR_EOF_SECONDS)  # (its stderr's thread)
        return self.output.tail(r)

    def _reads_as_consequence(self, r):
        if r not in self._consequences:  # asked at every poll: its stderr is waited for once
            self._consequences[r] = first_failure.reads_as_consequence(self._stderr_tail(r))
        return self._consequences[r]

    def _failed(self, code):
        """Whether an exit code is a failure: not 0, nor a rank stopping at a commit when told to."""
        return code != 0 and not (self.interrupted is not None and code == variables.LEFT_AT_COMMIT)

    def _failure_is_clear(self):
        """Whether a rank failed by itself, or a lost-peer failure has waited long enough for one."""
        failed = {r: seen for r, (code, seen) in self.exits.items() if self._failed(code)}
        if not failed:
            return self._lost_without_an_exit()
        return (any(not self._reads_as_consequence(r) for r in failed) or
                time.monotonic() - min(failed.values()) > CAUSE_GRACE_SECONDS)

    def _lost_without_an_exit(self):
        """In a job that goes on in place: ranks said they lost a peer and wait, and no rank has
        exited `CAUSE_GRACE_SECONDS` later (a host cut off, whose ssh may take minutes to notice):
        the ranks still running that said nothing are the ones lost. They are ended (their ssh
        killed), so that the job can go on without them; True then."""
        if not self.in_place or not self.output.reforming:
            return False
        if self._reform_seen is None:
            self._reform_seen = time.monotonic()
        lost = [r for r in self.ranks if r not in self.exits and r not in self.output.reforming]
        if not lost or time.monotonic() - self._reform_seen <= CAUSE_GRACE_SECONDS:
            return False
        for r in lost:
            self._unanswering.add(r)
            self.ranks[r].force()
        self._wait_all(remote_rank.SSH_EXIT_GRACE, silent=set(self.ranks) - set(lost))
        return True

    def _say(self, message):
        sys.stderr.write(f"tfring run: {message}\n")
        sys.stderr.flush()

    def _outcome(self):
        """Polls every rank until all have ended, the launcher got a signal, a failure is clear, or
        the ranks told that the job may grow (`interrupt` gave a reason) have not stopped at a
        commit in time (`_notice_seconds`)."""
        while not self._poll_all() and self.signalled is None and not self._failure_is_clear():
            if self._all_wait_to_grow():
                return
            if self.interrupted is None and self.interrupt is not None and (reason := self.interrupt()):
                self._notify(reason)
            elif self._notified_at is not None and time.monotonic() > self._notified_at + self._notice_seconds():
                return
            time.sleep(POLL_SECONDS)

    def _notice_seconds(self):
        """How long ranks told that the job may grow are given to stop: long once one has said that
        it commits, else only the time to say so."""
        return GROW_COMMIT_SECONDS if self.output.acknowledged else GROW_ACK_SECONDS

    def _all_ended_well(self):
        """Whether every rank has exited 0 by itself (a job told it may grow may finish first)."""
        return len(self.exits) == len(self.ranks) and all(code == 0 for code, _ in self.exits.values())

    def _can_reform(self):
        """Whether the job goes on in place and every rank said it can (`membership.CAN_REFORM`)."""
        return self.in_place and all(r in self.output.can_reform for r in self.ranks)

    def _all_wait_to_grow(self):
        """Whether, told that the job may grow, every rank stopped at a commit and waits in its process."""
        return (self.interrupted is not None and self._can_reform() and not self.exits
                and all(r in self.output.reforming for r in self.ranks))

    def _notify(self, reason):
        """Tells every rank the job may grow, so that they stop together at their next commit."""
        self.interrupted = reason
        self._notified_at = time.monotonic()
        how = "growing it in the ranks' processes" if self._can_reform() else "starting it again on them"
        self._say(f"{reason}: {how}, once the ranks stop at their next commit")
        for rank in list(self.ranks.values()):
            rank.notify()

    def _stop_on_interrupt(self):
        """Ends the job for `interrupted`'s reason: the ranks stopped at a commit, or are ended now;
        returns 0 when they all stopped (0 or `LEFT_AT_COMMIT`)."""
        if len(self.exits) == len(self.ranks):
            self._say("the ranks stopped at a commit")
        else:
            self._say("ending the ranks: " + (f"they did not stop at a commit within {GROW_COMMIT_SECONDS:g} s"
                                              if self.output.acknowledged else "they do not commit (tfring.elastic)"))
            self.output.hide_stderr()  # (their tracebacks of SIGTERM)
            self.terminate()
        self._end_leftovers(report=False)
        self._join_output()
        stopped = all(code in (0, variables.LEFT_AT_COMMIT) for code, _ in self.exits.values())
        return 0 if stopped else 128 + signal.SIGTERM

    def _end_leftovers(self, report):
        """Ends what ranks on this host left running in their process groups after they exited
        (SIGTERM, then SIGKILL `KILL_GRACE_SECONDS` later): nothing of a job outlives it, nor keeps
        it running by holding a rank's output open. `report`: say so first, one line per rank.
        (On other hosts `tfring.launch.remote` ends a rank's group when the rank ends.)"""
        self._end_adopted(report)
        left = {r: rank.leftovers() for r, rank in self.ranks.items() if isinstance(rank, local_rank.LocalRank)}
        left = {r: members for r, members in left.items() if members}
        if not left:
            return
        if report:
            for r, members in left.items():
                self._say(_left_running(r, members))
        for r in left:
            self.ranks[r].signal(signal.SIGTERM)
        deadline = time.monotonic() + KILL_GRACE_SECONDS
        while any(self.ranks[r].leftovers() for r in left) and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
        for r in left:
            if self.ranks[r].leftovers():
                self.ranks[r].kill()

    def _end_adopted(self, report):
        """Ends the processes ranks started in sessions of their own (`setsid`, a daemon), which
        the launcher inherited as a subreaper once their parents ended; says so when `report`."""
        started = {rank.proc.pid for rank in self.ranks.values() if getattr(rank, "proc", None) is not None}
        members = local_rank.adopted(started)
        if not members:
            return
        if report:
            self._say(_left_running("a rank", members, "in a session of its own" if len(members) == 1 else
                                    "in sessions of their own"))
        local_rank.end_adopted(members, KILL_GRACE_SECONDS)

    def _stop_on_signal(self):
        """Passes the launcher's signal on, kills the ranks still running `KILL_GRACE_SECONDS` later,
        and says so in one line; returns 0 when every rank then exited 0, else 128+signal."""
        signum = self.signalled
        self.output.hide_stderr()
        self.signal_all(signum)
        self._wait_all(KILL_GRACE_SECONDS)
        if len(self.exits) < len(self.ranks):
            name = signal.Signals(signum).name
            self._say(f"the ranks did not stop within {KILL_GRACE_SECONDS:g} s of {name}; killing them")
            self._kill_all()
        self._end_leftovers(report=False)
        self._join_output()
        hidden = self.output.hidden_lines
        note = f" ({hidden} lines of the ranks' stderr since then hidden; --all-output shows them)" if hidden else ""
        self._say(f"stopped by {'Ctrl-C' if signum == signal.SIGINT else signal.Signals(signum).name}{note}")
        clean = len(self.exits) == len(self.ranks) and all(code == 0 for code, _ in self.exits.values())
        return 0 if clean else 128 + signum

    def _silent(self):
        """Remote ranks whose host failed ranks say went silent (`first_failure.SILENT`) and that
        have still not ended, once `CAUSE_GRACE_SECONDS` have passed since the first failure."""
        failed = [(seen, r) for r, (code, seen) in self.exits.items() if code != 0]
        if not failed or time.monotonic() - min(failed)[0] <= CAUSE_GRACE_SECONDS:
            return set()
        named = {first_failure.silent_named(self._stderr_tail(r)) for _, r in failed}
        return {r for r in named if r in self.ranks and r not in self.exits
                and not isinstance(self.ranks[r], local_rank.LocalRank)}

    def _stop_on_failure(self):
        """Stops the other ranks and names the one that failed first; returns its exit code."""
        stopping_since = time.monotonic()
        self.terminate(self._silent())
        self._join_output()
        ends = []
        for r in self.ranks:
            code, seen = self.exits.get(r, (None, math.inf))
            ends.append(first_failure.RankEnd(r, code, seen, seen >= stopping_since, self._stderr_tail(r)))
        cause, others = first_failure.blame(ends)
        line = self.ranks[cause.rank].describe_failure(cause.code)
        if cause.rank in self._unanswering:
            line = f"rank {cause.rank} on host {self.ranks[cause.rank].slot.host} stopped answering (the other ranks lost it)"
        self.cause = (cause.rank, line, first_failure.reads_as_consequence(cause.tail))
        self._say(first_failure.summary(line, cause.tail, others))
        return cause.code

    def end_kept(self):
        """Ends the ranks handed over after a failure, when the job starts again instead of going
        on with them (SIGTERM, then SIGKILL after the grace)."""
        if not self.kept:
            return
        for r, kept in self.kept.items():
            self.ranks[r] = kept.rank
            self._threads.extend(kept.threads)
        self.kept = None
        self.output.hide_stderr()  # (their tracebacks of SIGTERM)
        self.terminate()
        self._join_output()

    def _keep_waiting_ranks(self):
        """In a job that goes on in place, where every rank said it can: once every rank still
        running has said that it waits for the next membership (within `REFORM_SAY_SECONDS`),
        hands them all over (`kept`); if one has not, or the launcher was signalled, keeps none."""
        if not self._can_reform():
            return
        deadline = time.monotonic() + REFORM_SAY_SECONDS
        while True:
            self._poll_all()
            running = [r for r in self.ranks if r not in self.exits]
            waiting = all(r in self.output.reforming for r in running)
            if waiting or time.monotonic() > deadline or self.signalled is not None:
                break
            time.sleep(POLL_SECONDS)
        if running and waiting and self.signalled is None:
            self.kept = {r: self.hand_over(r) for r in running}

    def _join_output(self):
        """Lets the output threads finish (at most 5 s in all), so the launcher's line comes last."""
        deadline = time.monotonic() + 5
        for t in self._threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))

    def wait(self):
        """Waits for the job to end, and ends what is left of it.

        Returns:
            The launcher's exit code: 0 when every rank exited 0, else the code of the rank that
            failed first; after the launcher's signal N, 128+N (0 if every rank then exited 0);
            when `interrupt` ended the job (`grown`), 0 if every rank stopped at a commit.
        """
        self._outcome()
        if self.signalled is not None:
            code = self._stop_on_signal()
        elif any(self._failed(code) for code, _ in self.exits.values()):
            self._keep_waiting_ranks()
            code = self._stop_on_failure()
        elif self._all_wait_to_grow():
            self._say("the ranks stopped at a commit and wait for the new ones in their processes")
            self.kept = {r: self.hand_over(r) for r in list(self.ranks)}
            self.grown, code = True, 0
        elif self.interrupted is not None and not self._all_ended_well():
            self.grown = True
            code = self._stop_on_interrupt()
        else:
            code = 0
            self._end_leftovers(report=True)
            self._join_output()
        self.output.close()
        return code


def _left_running(rank, members, where=""):
    """The launcher's line about processes rank `rank` (a number, or "a rank") left running, e.g.
    "(pid 42: sleep)"; `where`: where they run, out of the rank's process group, if they do."""
    n = len(members)
    named = ", ".join(f"{pid}: {name}" for pid, name in members[:5]) + (", ..." if n > 5 else "")
    who = rank if isinstance(rank, str) else f"rank {rank}"
    where = f" {where}" if where else ""
    return (f"{who} left {n} process{'es' if n > 1 else ''} running after it exited{where} "
            f"({'pids' if n > 1 else 'pid'} {named}); ending {'them' if n > 1 else 'it'} with the job "
            "(wait for what a rank starts before it exits)")
