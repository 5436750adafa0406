"""One rank started on this host, tied to the process that started it.

The rank dies with its starter however the starter ends: the direct child gets SIGKILL through
`PR_SET_PDEATHSIG`, and a rank behind a shell wrapper reads EOF on a pipe whose write end only the
starter holds (`tfring.init()` watches it through TFRING_LAUNCHER_FD). The starter is `tfring run`
on its own host, or `tfring.launch.remote` on another host.
"""

import ctypes
import os
import signal
import subprocess
import time

from tfring.launch import cluster
from tfring.launch import membership
from tfring.launch import variables

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_LIBC = ctypes.CDLL(None, use_errno=True)


def signal_on_parent_death(signum):
    """Asks the kernel to send `signum` to this process when its parent ends (PR_SET_PDEATHSIG),
    however it ends, SIGKILL included. Check `os.getppid()` afterwards: a parent that ended before
    this call does not send it.

    Args:
        signum: the signal, e.g. `signal.SIGKILL`.

    Example:

    >>> signal_on_parent_death(signal.SIGHUP)
    """
    _LIBC.prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0)


def die_with(parent_pid, cores=None):
    """A `preexec_fn`: the child gets SIGKILL when `parent_pid` dies, even by SIGKILL.

    Args:
        parent_pid: the starter's pid (`os.getpid()` before the fork).
        cores: CPU numbers the child (and every thread and process it starts) is bound to, or None.

    Returns:
        A function for `subprocess.Popen(preexec_fn=...)`.
    """
    def arm():
        signal_on_parent_death(signal.SIGKILL)
        if os.getppid() != parent_pid:  # the starter died before the line above took effect
            os._exit(1)
        if cores is not None:
            os.sched_setaffinity(0, cores)
    return arm


def _processes():
    """(pid, command name, parent pid, process group) of every live process, read from /proc;
    ended processes not yet reaped (zombies) are left out."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:  # it ended while we looked
            continue
        # "pid (name) state ppid pgrp ...": the name may hold spaces and parentheses.
        name, fields = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        if fields[0] != "Z":
            yield int(entry), name, int(fields[1]), int(fields[2])


def process_group(pgid):
    """The processes of process group `pgid` that have not ended, read from /proc.

    Args:
        pgid: the group's id (a rank's pid: each rank leads its own session).

    Returns:
        A list of (pid, command name), by pid; ended processes not yet reaped (zombies) are left out.

    Example:

    >>> process_group(rank.proc.pid)
    [(4242, 'sleep')]
    """
    return sorted((pid, name) for pid, name, _, group in _processes() if group == pgid)


def become_subreaper():
    """Makes this process the one that inherits its descendants whose parents end
    (PR_SET_CHILD_SUBREAPER), instead of init: a daemon a rank starts in a session of its own
    (`setsid`, out of the rank's process group) then stays within reach of `tfring run`.

    Example:

    >>> become_subreaper()   # tfring run, before it starts the ranks
    """
    _LIBC.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def adopted(started):
    """The live processes this process inherited: its children that it did not start itself,
    outside the process groups of those it did (each rank leads its own: `process_group`).

    Args:
        started: the pids of the children it started (the ranks, ssh).

    Returns:
        A list of (pid, command name), by pid.

    Example:

    >>> adopted({rank.proc.pid for rank in ranks})
    [(4243, 'sleep')]
    """
    me = os.getpid()
    return sorted((pid, name) for pid, name, parent, group in _processes()
                  if parent == me and pid not in started and group not in started)


def end_adopted(members, grace, poll=0.05):
    """Ends processes this process inherited: SIGTERM, then SIGKILL after `grace` seconds, each reaped.

    Args:
        members: (pid, command name) pairs, as `adopted` gives them.
        grace: seconds between SIGTERM and SIGKILL.
        poll: seconds between checks.
    """
    pids = {pid for pid, _ in members}
    for signum, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, grace)):
        for pid in pids:
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while pids and time.monotonic() < deadline:
            pids = {pid for pid in pids if not _reaped(pid)}
            time.sleep(poll)
        if not pids:
            return


def _reaped(pid):
    try:
        return os.waitpid(pid, os.WNOHANG)[0] == pid
    except ChildProcessError:
        return True  # not ours (any more)


def exit_code(returncode):
    """A process's return code as a shell reports it: 128+N for a process killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


class LocalRank:
    """A rank process on this host, in its own session (its process group gets the signals).

    Args:
        slot: the rank's `hosts.Slot`.
        command: the program and its arguments.
        env: its complete environment (without TFRING_LAUNCHER_FD: added here).
        stdout, stderr: as for `subprocess.Popen` (PIPE, or a file descriptor to inherit).
        cores: the CPU numbers to bind it to (`core_binding.plan`), or None.

    Raises:
        OSError: the command cannot be started.

    Example:

    >>> rank = LocalRank(slot, ["python", "train.py"], env, subprocess.PIPE, subprocess.PIPE)
    >>> rank.wait()
    0
    """

    def __init__(self, slot, command, env, stdout, stderr, cores=None):
        self.slot = slot
        watch_fd, self._lifeline = os.pipe()
        os.set_inheritable(self._lifeline, False)
        try:
            self.proc = subprocess.Popen(
                command, env={**env, cluster.LAUNCHER_FD: str(watch_fd)}, stdin=subprocess.DEVNULL,
                stdout=stdout, stderr=stderr, pass_fds=(watch_fd,), start_new_session=True,
                preexec_fn=die_with(os.getpid(), cores))
        except OSError:
            os.close(self._lifeline)
            raise
        finally:
            os.close(watch_fd)

    def poll(self):
        """The exit code (128+N for signal N) once it has ended, else None."""
        code = self.proc.poll()
        if code is not None and self._lifeline is not None:
            os.close(self._lifeline)
            self._lifeline = None
        return None if code is None else exit_code(code)

    def notify(self):
        """Tells the rank the job may grow (`variables.GROW_NOTICE` on its launcher pipe)."""
        self.tell(variables.GROW_NOTICE)

    def reform(self, env):
        """Gives the rank its place in the job's next membership (`membership.encode(env)` on its
        launcher pipe): it goes on in its process as rank `slot.rank` (`tfring.elastic`)."""
        self.tell(membership.encode(env))

    def tell(self, data):
        """Writes `data` (a message of `launch.membership`) on the rank's launcher pipe."""
        if self._lifeline is not None:
            try:
                os.write(self._lifeline, data)
            except OSError:  # it has ended
                pass

    def leftovers(self):
        """What the rank left running in its process group after it ended ([] while it runs).

        Returns:
            A list of (pid, command name): the processes it started and did not wait for.
        """
        return [] if self.proc.poll() is None else process_group(self.proc.pid)

    def signal(self, signum):
        """Sends `signum` to the rank's process group (a rank's helper processes get it too), also
        once the rank has ended, to what it left running there."""
        if self.proc.poll() is None or self.leftovers():
            try:
                os.killpg(self.proc.pid, signum)
            except (ProcessLookupError, PermissionError):
                pass

    def kill(self):
        """SIGKILL to the rank's process group, also what is left of it after the rank itself ended."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def force(self):
        """The same as `kill` (a local rank cannot linger behind a channel)."""
        self.kill()

    def wait(self, timeout=None):
        """Waits for the rank to end and returns its exit code.

        Raises:
            subprocess.TimeoutExpired: it is still running after `timeout` seconds.
        """
        self.proc.wait(timeout)
        return self.poll()

    def describe_failure(self, code):
        """One line for the launcher: which rank failed and how."""
        if self.proc.returncode is not None and self.proc.returncode < 0:
            return f"rank {self.slot.rank} was killed by {signal.Signals(-self.proc.returncode).name}"
        return f"rank {self.slot.rank} exited with code {code}"
