"""`tfring run`: starts the ranks of a job, on this host and over ssh on others, and supervises them.

Each rank gets its rank, the sizes, the address of rank 0's rendezvous store and a fresh job
secret in its environment. Output lines are prefixed with `[rank]`. SIGINT/SIGTERM are forwarded
to every rank on every host. When one rank exits non-zero (or the connection to its host is lost),
the others are stopped (SIGTERM, then SIGKILL after a grace period: all gone within 5 s) and the
launcher exits with the code of the rank that failed first, naming it (`first_failure`) in one
last line. However the job ends, what a rank on this host left running in its process group is
ended with it (SIGTERM, then SIGKILL after the grace); after a job that succeeded the launcher
names those processes, one line per rank, and still exits 0. After Ctrl-C the launcher says so
once, and hides what the ranks write to stderr from then on (their KeyboardInterrupt tracebacks)
unless `--all-output`.

With other hosts (`-H`, `--hostfile`) every remote rank is started by `ssh HOST` running
`tfring.launch.remote` in the same working directory and interpreter as here (a shared file system
is assumed, as horovodrun and mpirun do); its environment, secret included, travels over the ssh
channel. Before any rank starts, each host reports what it runs: another tfring build or
TensorFlow version than rank 0's host fails the start, naming the host.
"""

import dataclasses
import math
import os
import secrets
import signal
import subprocess
import sys
import threading
import time

from tfring.launch import addresses
from tfring.launch import cluster
from tfring.launch import core_binding
from tfring.launch import first_failure
from tfring.launch import forwarding
from tfring.launch import hosts as hostlist
from tfring.launch import local_rank
from tfring.launch import output
from tfring.launch import remote_rank
from tfring.launch import versions

KILL_GRACE_SECONDS = 4.0
POLL_SECONDS = 0.05
# How long a failure that reads as a lost peer waits for the rank that caused it to fail too (a
# rank that raised may exit after its neighbour noticed its closed connection).
CAUSE_GRACE_SECONDS = 3.0
# How long the launcher waits for a rank's last stderr lines once it has exited.
STDERR_EOF_SECONDS = 1.0


@dataclasses.dataclass
class Options:
    """How `tfring run` starts and watches a job (the command line's options).

    Args:
        timeout: seconds a collective may stall (passed to the ranks as TFRING_TIMEOUT), or None.
        all_output: show every rank's stdout, not only rank 0's, and the ranks' stderr after Ctrl-C
            (hidden by default: their KeyboardInterrupt tracebacks).
        hosts: a list of `hosts.Host`, or None for this host only.
        rsh, ssh_port, ssh_identity_file: how to reach other hosts (`remote_rank.ssh_prefix`).
        exports: `-x` variables for every rank (`forwarding.parse_exports`).
        output_dir: a folder for one log file per rank, or None.
        start_timeout: seconds every host has to answer before the start fails.
        interface: the network interface whose address the hosts advertise, or None.
        bind_to: "core" binds each rank to its share of its host's cores (`core_binding`); "none".
    """

    timeout: float = None
    all_output: bool = False
    hosts: list = None
    rsh: str = None
    ssh_port: int = None
    ssh_identity_file: str = None
    exports: dict = dataclasses.field(default_factory=dict)
    output_dir: str = None
    start_timeout: float = 30.0
    interface: str = None
    bind_to: str = "none"


def _cannot_start(command, error):
    hint = ""
    if command[0].endswith(".py"):
        hint = f" (to run a Python script, name the interpreter: tfring run -np N python {' '.join(command)})"
    return f"tfring run: cannot start {command[0]!r}: {error.strerror or error}{hint}"


class StartError(RuntimeError):
    """The job could not be started (a command not found, a host not reached): a one-line message.

    Args:
        message: the line to print.
        exit_code: the launcher's exit code (127; 128+N when signal N interrupted the start).

    Example:

    >>> raise StartError("tfring run: cannot start 'train.py': Permission denied")
    """

    def __init__(self, message, exit_code=127):
        super().__init__(message)
        self.exit_code = exit_code


class Job:
    """A running job: its ranks (local and remote) and the threads copying their output.

    Args:
        command: the program and its arguments.
        num_processes: the job size (None: every slot of `options.hosts`).
        options: an `Options`.
        env: the launcher's environment (default `os.environ`).
    """

    def __init__(self, command, num_processes, options=None, env=None):
        self.command = list(command)
        self.options = options or Options()
        self.slots = hostlist.plan_slots(num_processes, self.options.hosts)
        self.base_env = dict(os.environ if env is None else env)
        self.output = output.JobOutput(self.options.all_output, self.options.output_dir)
        here = {host: hostlist.is_local(host) for host in {s.host for s in self.slots}}
        if sum(here.values()) > 1:
            raise ValueError(f"{' and '.join(sorted(h for h in here if here[h]))} are both this host: "
                             "name it once, with all its slots")
        self.remote_slots = [s for s in self.slots if not here[s.host]]
        self.ranks = {}  # rank -> LocalRank or RemoteRank
        self.exits = {}  # rank -> (exit code, time.monotonic() when the exit was first seen)
        self.threads = []
        self._stderr_pumps = {}  # rank -> the thread reading its stderr
        self._consequences = {}  # rank -> whether its stderr reads as a lost peer
        self.signalled = None  # SIGINT/SIGTERM received by the launcher (the handler only records it)

    @property
    def runs_here(self):
        """Whether some ranks run on the launcher's own host."""
        return len(self.remote_slots) < len(self.slots)

    def _thread(self, target, *args):
        t = threading.Thread(target=target, args=args, daemon=True)
        t.start()
        self.threads.append(t)
        return t

    def _rank_env(self, slot, store_addr, secret, job_id):
        env = {
            cluster.RANK: str(slot.rank), cluster.SIZE: str(len(self.slots)),
            cluster.LOCAL_RANK: str(slot.local_rank), cluster.LOCAL_SIZE: str(slot.local_size),
            cluster.STORE_ADDR: store_addr, cluster.SECRET: secret, cluster.JOB_ID: job_id,
            "PYTHONUNBUFFERED": "1",
        }
        if self.options.timeout is not None:
            env[cluster.TIMEOUT] = str(self.options.timeout)
        env.update(self.options.exports)
        return env

    def start(self):
        """Reaches every host, checks what they run, then starts every rank.

        Raises:
            StartError: a host did not answer or runs other versions, or a command cannot start.
        """
        secret, job_id = secrets.token_hex(32), secrets.token_hex(6)
        local_cores = {s.rank: core_binding.plan(self.options.bind_to, s.local_rank, s.local_size)
                       for s in self.slots if s not in self.remote_slots}
        self._connect_remotes()
        store_addr, here = self._addresses()
        for slot in self.slots:
            self._stop_if_signalled()
            env = self._rank_env(slot, store_addr, secret, job_id)
            if slot.rank in self.ranks:
                self._start_remote(self.ranks[slot.rank], env)
            else:
                self._start_local(slot, {**self._local_env(here), **env}, local_cores[slot.rank])

    def _local_env(self, here):
        """This host's ranks see the launcher's environment; in a job across hosts they advertise `here`."""
        env = dict(self.base_env)
        if here:
            env.setdefault(cluster.ADVERTISE_HOST, here)
        return env

    def _start_local(self, slot, env, cores):
        try:
            rank = local_rank.LocalRank(slot, self.command, env, subprocess.PIPE, subprocess.PIPE, cores)
        except OSError as e:
            self.terminate()
            raise StartError(_cannot_start(self.command, e)) from e
        self.ranks[slot.rank] = rank
        self._thread(output.pump, rank.proc.stdout, self.output.stream(slot.rank, stdout=True))
        self._stderr_pumps[slot.rank] = self._thread(output.pump, rank.proc.stderr,
                                                     self.output.stream(slot.rank, stdout=False))

    def _start_remote(self, rank, env):
        rank.start_stderr(self.output.stream(rank.slot.rank, stdout=False))
        rank.send_job({**forwarding.forwarded(self.base_env, self.options.exports), **env}, self.command,
                      self.options.bind_to)

    def _connect_remotes(self):
        """Starts ssh for every remote rank and waits until each far end has answered."""
        o = self.options
        prefix = remote_rank.ssh_prefix(o.rsh, o.ssh_port, o.ssh_identity_file, o.start_timeout)
        command = remote_rank.remote_command(_working_directory(self.base_env), sys.executable, self.base_env)
        for slot in self.remote_slots:
            try:
                rank = remote_rank.RemoteRank(slot, prefix, command)
            except OSError as e:
                self.terminate()
                raise StartError(f"tfring run: cannot start {prefix[0]!r} to reach {slot.host}: "
                                 f"{e.strerror or e} (see --rsh)") from e
            self.ranks[slot.rank] = rank
            self._thread(rank.pump_stdout, self.output.stream(slot.rank, stdout=True))
            self._stderr_pumps[slot.rank] = self._thread(rank.pump_stderr, self.output.stream(slot.rank, stdout=False))
            rank.request(o.interface, want_port=slot.rank == 0)
        deadline = time.monotonic() + o.start_timeout
        while not all(r.ready.is_set() for r in self.ranks.values()) and time.monotonic() < deadline:
            self._stop_if_signalled()
            time.sleep(POLL_SECONDS)
        for rank in self.ranks.values():
            if rank.reply is None:
                self._fail_start(f"cannot start rank {rank.slot.rank} on host {rank.slot.host}: "
                                 f"{rank.start_error(o.start_timeout)}")
        self._check_versions()

    def _fail_start(self, message, exit_code=127):
        self.terminate()
        self.output.close()
        raise StartError(f"tfring run: {message}", exit_code)

    def _stop_if_signalled(self):
        if self.signalled is not None:
            name = signal.Signals(self.signalled).name
            self._fail_start(f"stopped by {name} while starting the job", 128 + self.signalled)

    def _check_versions(self):
        """Every host must run what rank 0's host runs."""
        here = f"{os.uname().nodename} (this host)"
        reported = {r.slot.host: r.reply["versions"] for r in self.ranks.values()}
        if self.runs_here:
            reported[here] = versions.this_host()
        reference = reported[self.slots[0].host if 0 in self.ranks else here]
        for host, theirs in reported.items():
            message = versions.mismatch(host, theirs, self.slots[0].host, reference)
            if message:
                self._fail_start(message)

    def _addresses(self):
        """Rank 0's store address, and the address this host's ranks advertise (None on one host)."""
        if not self.ranks:
            return f"127.0.0.1:{addresses.free_port()}", None
        here = self._this_host_address() if self.runs_here or 0 not in self.ranks else None
        if 0 in self.ranks:
            reply = self.ranks[0].reply
            return f"{reply['address']}:{reply['port']}", here
        return f"{here}:{addresses.free_port(here)}", here

    def _this_host_address(self):
        """--interface, else TFRING_HOST, else the address the other hosts' sshd saw us come from."""
        try:
            if self.options.interface:
                return addresses.interface_address(self.options.interface)
        except ValueError as e:
            self._fail_start(str(e))
        if self.base_env.get(cluster.ADVERTISE_HOST):
            return self.base_env[cluster.ADVERTISE_HOST]
        for rank in self.ranks.values():  # where ssh came from, if it is ours (not a jump host's)
            if addresses.is_own_ipv4(rank.reply.get("launcher_address")):
                return rank.reply["launcher_address"]
        return addresses.route_source(next(iter(self.ranks.values())).reply["address"]) or "127.0.0.1"

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

    def _wait_all(self, seconds):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not self._poll_all():
            time.sleep(POLL_SECONDS)

    def terminate(self):
        """SIGTERM to every rank, SIGKILL to those still alive after the grace period."""
        self.signal_all(signal.SIGTERM)
        self._wait_all(KILL_GRACE_SECONDS)
        self._kill_all()

    def _kill_all(self):
        """SIGKILL to every rank (a remote one through its closed channel), then ssh itself."""
        for rank in self.ranks.values():
            rank.kill()
        self._wait_all(remote_rank.SSH_EXIT_GRACE)
        for rank in self.ranks.values():
            rank.force()
            try:
                rank.wait(remote_rank.SSH_EXIT_GRACE)
            except subprocess.TimeoutExpired:
                pass  # stuck in the kernel: nothing more a signal can do

    def _stderr_tail(self, r):
        """Rank `r`'s last stderr lines, once they have arrived (a helper it left running may hold
        its stderr open: then what came within `STDERR_EOF_SECONDS`)."""
        if r in self._stderr_pumps:
            self._stderr_pumps[r].join(timeout=STDERR_EOF_SECONDS)
        return self.output.tail(r)

    def _reads_as_consequence(self, r):
        if r not in self._consequences:  # asked at every poll: its stderr is waited for once
            self._consequences[r] = first_failure.reads_as_consequence(self._stderr_tail(r))
        return self._consequences[r]

    def _failure_is_clear(self):
        """Whether a rank failed by itself, or a lost-peer failure has waited long enough for one."""
        failed = {r: seen for r, (code, seen) in self.exits.items() if code != 0}
        if not failed:
            return False
        return (any(not self._reads_as_consequence(r) for r in failed) or
                time.monotonic() - min(failed.values()) > CAUSE_GRACE_SECONDS)

    def _say(self, message):
        sys.stderr.write(f"tfring run: {message}\n")
        sys.stderr.flush()

    def _outcome(self):
        """Polls every rank until all have ended, the launcher got a signal, or a failure is clear."""
        while not self._poll_all() and self.signalled is None and not self._failure_is_clear():
            time.sleep(POLL_SECONDS)

    def _end_leftovers(self, report):
        """Ends what ranks on this host left running in their process groups after they exited
        (SIGTERM, then SIGKILL `KILL_GRACE_SECONDS` later): nothing of a job outlives it, nor keeps
        it running by holding a rank's output open. `report`: say so first, one line per rank.
        (On other hosts `tfring.launch.remote` ends a rank's group when the rank ends.)"""
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

    def _stop_on_failure(self):
        """Stops the other ranks and names the one that failed first; returns its exit code."""
        stopping_since = time.monotonic()
        self.terminate()
        self._join_output()
        ends = []
        for r in self.ranks:
            code, seen = self.exits.get(r, (None, math.inf))
            ends.append(first_failure.RankEnd(r, code, seen, seen >= stopping_since, self._stderr_tail(r)))
        cause, others = first_failure.blame(ends)
        self._say(first_failure.summary(self.ranks[cause.rank].describe_failure(cause.code), cause.tail, others))
        return cause.code

    def _join_output(self):
        """Lets the output threads finish (at most 5 s in all), so the launcher's line comes last."""
        deadline = time.monotonic() + 5
        for t in self.threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))

    def wait(self):
        """Waits for the job; returns the exit code of the launcher."""
        self._outcome()
        if self.signalled is not None:
            code = self._stop_on_signal()
        elif any(code != 0 for code, _ in self.exits.values()):
            code = self._stop_on_failure()
        else:
            code = 0
            self._end_leftovers(report=True)
            self._join_output()
        self.output.close()
        return code


def _left_running(rank, members):
    """The launcher's line about processes rank `rank` left running, e.g. "(pid 42: sleep)"."""
    n = len(members)
    named = ", ".join(f"{pid}: {name}" for pid, name in members[:5]) + (", ..." if n > 5 else "")
    return (f"rank {rank} left {n} process{'es' if n > 1 else ''} running after it exited "
            f"({'pids' if n > 1 else 'pid'} {named}); ending {'them' if n > 1 else 'it'} with the job "
            "(wait for what a rank starts before it exits)")


def _working_directory(environ):
    """The directory the ranks start in: $PWD as the user typed it when it is this directory
    (`/home/u` rather than the automounted `/nfs/home/u` that getcwd() sees), else getcwd()."""
    cwd = os.getcwd()
    pwd = environ.get("PWD")
    try:
        return pwd if pwd and os.path.samefile(pwd, cwd) else cwd
    except OSError:
        return cwd


def run(command, num_processes, options=None):
    """Runs `command` as `num_processes` ranks and returns the launcher's exit code.

    Args:
        command: the program and its arguments, e.g. `["python", "train.py"]`.
        num_processes: the job size; None means every slot of `options.hosts`.
        options: an `Options` (hosts, ssh, output, timeouts); None: this host, defaults.

    Returns:
        0 when every rank exited 0, else the code of the rank that failed first (128+N for signal
        N); 128+N when the launcher got signal N (0 if every rank then exited 0).

    Raises:
        StartError: the job could not be started (the message says why, in one line).
        ValueError: bad hosts or slots (the message names them).

    Example:

    >>> run(["python", "-c", "import tfring; print(tfring.size())"], 2)
    [0] 2
    0
    """
    if not command:
        raise ValueError("tfring run: no command given")
    job = Job(command, num_processes, options)

    def record(signum, _frame):
        # Only noted here: the main thread passes it on (writing to ssh from a handler could
        # interrupt a write the main thread is in the middle of).
        if job.signalled is None:
            job.signalled = signum

    previous = {s: signal.signal(s, record) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        job.start()
        return job.wait()
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
