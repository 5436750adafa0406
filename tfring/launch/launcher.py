"""`tfring run`: starts the ranks of a job, on this host and over ssh on others, and supervises them.

Each rank gets its rank, the sizes, the address of rank 0's rendezvous store and a fresh job
secret in its environment. Output lines are prefixed with `[rank]`. SIGINT/SIGTERM are forwarded
to every rank on every host. When one rank exits non-zero (or the connection to its host is lost),
the others are stopped (SIGTERM, then SIGKILL after a grace period: all gone within 5 s) and the
launcher exits with that rank's code.

With other hosts (`-H`, `--hostfile`) every remote rank is started by `ssh HOST` running
`tfring.launch.remote` in the same working directory and interpreter as here (a shared file system
is assumed, as horovodrun and mpirun do); its environment, secret included, travels over the ssh
channel. Before any rank starts, each host reports what it runs: another tfring build or
TensorFlow version than rank 0's host fails the start, naming the host.
"""

import dataclasses
import os
import secrets
import signal
import subprocess
import sys
import threading
import time

from tfring.launch import addresses
from tfring.launch import cluster
from tfring.launch import forwarding
from tfring.launch import hosts as hostlist
from tfring.launch import local_rank
from tfring.launch import output
from tfring.launch import remote_rank
from tfring.launch import versions

KILL_GRACE_SECONDS = 4.0
POLL_SECONDS = 0.05


@dataclasses.dataclass
class Options:
    """How `tfring run` starts and watches a job (the command line's options).

    Args:
        timeout: seconds a collective may stall (passed to the ranks as TFRING_TIMEOUT), or None.
        all_output: show every rank's stdout, not only rank 0's (stderr is always shown).
        hosts: a list of `hosts.Host`, or None for this host only.
        rsh, ssh_port, ssh_identity_file: how to reach other hosts (`remote_rank.ssh_prefix`).
        exports: `-x` variables for every rank (`forwarding.parse_exports`).
        output_dir: a folder for one log file per rank, or None.
        start_timeout: seconds every host has to answer before the start fails.
        interface: the network interface whose address the hosts advertise, or None.
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


def _cannot_start(command, error):
    hint = ""
    if command[0].endswith(".py"):
        hint = f" (to run a Python script, name the interpreter: tfring run -np N python {' '.join(command)})"
    return f"tfring run: cannot start {command[0]!r}: {error.strerror or error}{hint}"


class StartError(RuntimeError):
    """The job could not be started (a command not found, a host not reached): a one-line message.

    Example:

    >>> raise StartError("tfring run: cannot start 'train.py': Permission denied")
    """


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
        self.remote_slots = [s for s in self.slots if not here[s.host]]
        self.ranks = {}  # rank -> LocalRank or RemoteRank
        self.threads = []
        self.started = False
        self.pending_signal = None  # a signal that arrived before every rank was started

    def _thread(self, target, *args):
        t = threading.Thread(target=target, args=args, daemon=True)
        t.start()
        self.threads.append(t)

    def _rank_env(self, slot, store_addr, secret, job_id):
        env = {
            cluster.RANK: str(slot.rank), cluster.SIZE: str(len(self.slots)),
            cluster.LOCAL_RANK: str(slot.local_rank), cluster.LOCAL_SIZE: str(slot.local_size),
            cluster.STORE_ADDR: store_addr, cluster.SECRET: secret, cluster.JOB_ID: job_id,
            "PYTHONUNBUFFERED": "1",
        }
        if self.options.timeout is not None:
            env["TFRING_TIMEOUT"] = str(self.options.timeout)
        env.update(self.options.exports)
        return env

    def start(self):
        """Reaches every host, checks what they run, then starts every rank.

        Raises:
            StartError: a host did not answer or runs other versions, or a command cannot start.
        """
        secret, job_id = secrets.token_hex(32), secrets.token_hex(6)
        self._connect_remotes()
        store_addr, here = self._addresses()
        for slot in self.slots:
            env = self._rank_env(slot, store_addr, secret, job_id)
            if slot.rank in self.ranks:
                self._start_remote(self.ranks[slot.rank], env)
            else:
                self._start_local(slot, {**self._local_env(here), **env})

    def _local_env(self, here):
        """This host's ranks see the launcher's environment; in a job across hosts they advertise `here`."""
        env = dict(self.base_env)
        if here:
            env.setdefault("TFRING_HOST", here)
        return env

    def _start_local(self, slot, env):
        try:
            rank = local_rank.LocalRank(slot, self.command, env, subprocess.PIPE, subprocess.PIPE)
        except OSError as e:
            self.terminate()
            raise StartError(_cannot_start(self.command, e)) from e
        self.ranks[slot.rank] = rank
        self._thread(output.pump, rank.proc.stdout, self.output.stream(slot.rank, stdout=True))
        self._thread(output.pump, rank.proc.stderr, self.output.stream(slot.rank, stdout=False))

    def _start_remote(self, rank, env):
        rank.start_stderr(self.output.stream(rank.slot.rank, stdout=False))
        rank.send_job({**forwarding.forwarded(self.base_env, self.options.exports), **env}, self.command)

    def _connect_remotes(self):
        """Starts ssh for every remote rank and waits until each far end has answered."""
        o = self.options
        prefix = remote_rank.ssh_prefix(o.rsh, o.ssh_port, o.ssh_identity_file, o.start_timeout)
        command = remote_rank.remote_command(os.getcwd(), sys.executable, self.base_env)
        for slot in self.remote_slots:
            try:
                rank = remote_rank.RemoteRank(slot, prefix, command)
            except OSError as e:
                self.terminate()
                raise StartError(f"tfring run: cannot start {prefix[0]!r} to reach {slot.host}: "
                                 f"{e.strerror or e} (see --rsh)") from e
            self.ranks[slot.rank] = rank
            self._thread(rank.pump_stdout, self.output.stream(slot.rank, stdout=True))
            self._thread(rank.pump_stderr, self.output.stream(slot.rank, stdout=False))
            rank.request(o.interface, want_port=slot.rank == 0)
        deadline = time.monotonic() + o.start_timeout
        for rank in self.ranks.values():
            if not rank.ready.wait(max(0.0, deadline - time.monotonic())) or rank.reply is None:
                self._fail_start(f"cannot start rank {rank.slot.rank} on host {rank.slot.host}: "
                                 f"{rank.start_error(o.start_timeout)}")
        self._check_versions()

    def _fail_start(self, message):
        self.terminate()
        raise StartError(f"tfring run: {message}")

    def _check_versions(self):
        """Every host must run what rank 0's host runs."""
        first = self.slots[0]
        reference = self.ranks[0].reply["versions"] if 0 in self.ranks else versions.this_host()
        reported = {r.slot.host: r.reply["versions"] for r in self.ranks.values()}
        if len(reported) < len({s.host for s in self.slots}):  # this host runs ranks too
            reported.setdefault(os.uname().nodename + " (this host)", versions.this_host())
        for host, theirs in reported.items():
            message = versions.mismatch(host, theirs, first.host, reference)
            if message:
                self._fail_start(message)

    def _addresses(self):
        """Rank 0's store address, and the address this host's ranks advertise (None on one host)."""
        if not self.ranks:
            return f"127.0.0.1:{addresses.free_port()}", None
        here = self._this_host_address()
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
        if self.base_env.get("TFRING_HOST"):
            return self.base_env["TFRING_HOST"]
        for rank in self.ranks.values():
            if rank.reply.get("launcher_address"):
                return rank.reply["launcher_address"]
        return addresses.route_source(next(iter(self.ranks.values())).reply["address"]) or "127.0.0.1"

    def signal_all(self, signum):
        """Passes `signum` to every rank still running, on every host."""
        for rank in self.ranks.values():
            rank.signal(signum)

    def _wait_all(self, seconds):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and any(r.poll() is None for r in self.ranks.values()):
            time.sleep(POLL_SECONDS)

    def terminate(self):
        """SIGTERM to every rank, SIGKILL to those still alive after the grace period."""
        self.signal_all(signal.SIGTERM)
        self._wait_all(KILL_GRACE_SECONDS)
        for rank in self.ranks.values():
            rank.kill()
        self._wait_all(remote_rank.SSH_EXIT_GRACE)
        for rank in self.ranks.values():
            rank.force()
            rank.wait()

    def _first_failure(self):
        """(rank, code) of the first rank that failed; (None, 0) when all succeeded; None while running."""
        codes = {r: rank.poll() for r, rank in self.ranks.items()}
        for r, code in codes.items():
            if code not in (None, 0):
                return r, code
        return (None, 0) if all(c == 0 for c in codes.values()) else None

    def wait(self):
        """Waits for the job; returns the exit code of the launcher."""
        outcome = self._first_failure()
        while outcome is None:
            time.sleep(POLL_SECONDS)
            outcome = self._first_failure()
        failed, code = outcome
        if failed is not None:
            others = any(rank.poll() is None for rank in self.ranks.values())
            sys.stderr.write(f"tfring run: {self.ranks[failed].describe_failure(code)}"
                             f"{'; stopping the other ranks' if others else ''}\n")
            sys.stderr.flush()
            self.terminate()
        for t in self.threads:
            t.join(timeout=5)
        self.output.close()
        return code


def run(command, num_processes, options=None):
    """Runs `command` as `num_processes` ranks and returns the launcher's exit code.

    Args:
        command: the program and its arguments, e.g. `["python", "train.py"]`.
        num_processes: the job size; None means every slot of `options.hosts`.
        options: an `Options` (hosts, ssh, output, timeouts); None: this host, defaults.

    Returns:
        0 when every rank exited 0, else the first failing rank's code (128+N for signal N).

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

    def forward(signum, _frame):
        # Each signal is passed on exactly once: a second SIGINT would interrupt the ranks' own
        # handlers (Python turns it into KeyboardInterrupt during their shutdown).
        if job.started:
            job.signal_all(signum)
        else:
            job.pending_signal = signum

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        job.start()
        job.started = True
        if job.pending_signal is not None:
            job.signal_all(job.pending_signal)
        return job.wait()
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
