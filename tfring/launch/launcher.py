"""`tfring run`: starts the processes of a job on this host and supervises them.

Each process gets its rank, the sizes, the address of rank 0's rendezvous store and a fresh job
secret in its environment. Output lines are prefixed with `[rank]`. SIGINT/SIGTERM are forwarded.
When one process exits non-zero, the others are terminated (SIGTERM, then SIGKILL after a grace
period of at most 5 s) and the launcher exits with that process's code.

Hosts (`-H host:slots,...` over ssh) are not supported yet; `Slot` and the per-host local ranks
are already computed per host so that they can be added without changing the environment contract.
"""

import ctypes
import dataclasses
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time

from tfring.launch import cluster

KILL_GRACE_SECONDS = 4.0
POLL_SECONDS = 0.05
_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True)


@dataclasses.dataclass
class Slot:
    """One process of the job: where it runs and what it is."""

    host: str
    rank: int
    local_rank: int
    local_size: int


def plan_slots(num_processes, hosts=None):
    """Assigns ranks to hosts in order, filling each host's slots.

    Args:
        num_processes: the job size.
        hosts: list of (host, slots); None means all on this host.

    Returns:
        A list of `Slot`, one per rank.
    """
    if num_processes < 1:
        raise ValueError(f"-np must be at least 1, got {num_processes}")
    hosts = hosts or [("localhost", num_processes)]
    if sum(s for _, s in hosts) < num_processes:
        raise ValueError(f"{num_processes} processes do not fit the {sum(s for _, s in hosts)} slots given")
    slots, rank = [], 0
    for host, count in hosts:
        here = min(count, num_processes - rank)
        for local in range(here):
            slots.append(Slot(host, rank, local, here))
            rank += 1
        if rank == num_processes:
            break
    return slots


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago (for the store, tests and benchmarks).

    Returns:
        An int.
    """
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with(parent_pid):
    """A preexec_fn: the child gets SIGKILL when the launcher dies, even by SIGKILL."""
    def arm():
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent_pid:  # the launcher died before the line above took effect
            os._exit(1)
    return arm


# "path.py:12: UserWarning: text", the first line of a Python warning (its source line follows).
_WARNING_LINE = re.compile(rb"^\S.*:\d+: \w*Warning: ")


class WarningsOnce:
    """Lets each distinct Python warning through once per job: the ranks run the same code, so
    rank 1's copy of rank 0's warning (and its indented source line) says nothing new.

    Example:

    >>> keep = WarningsOnce().filter()   # one per output stream
    >>> [keep(b"t.py:1: UserWarning: x\\n"), keep(b"t.py:1: UserWarning: x\\n")]
    [True, False]
    """

    def __init__(self):
        self._seen = set()
        self._lock = threading.Lock()

    def filter(self):
        """A predicate for one output stream (it remembers whether it is inside a dropped warning).

        Returns:
            A function: line (bytes) -> True to show it.
        """
        dropping = [False]

        def keep(line):
            if dropping[0] and line[:1] in (b" ", b"\t"):
                return False  # the source line of a dropped warning
            dropping[0] = False
            if not _WARNING_LINE.match(line):
                return True
            with self._lock:
                if line in self._seen:
                    dropping[0] = True
                    return False
                self._seen.add(line)
            return True

        return keep


def _pump(stream, rank, sink, show, keep=None):
    """Copies a child's output line by line, prefixed with its rank (lines `keep` refuses: not)."""
    prefix = f"[{rank}] ".encode()
    for line in iter(stream.readline, b""):
        if show and (keep is None or keep(line)):
            sink.buffer.write(prefix + line)
            sink.buffer.flush()
    stream.close()


def _cannot_start(command, error):
    hint = ""
    if command[0].endswith(".py"):
        hint = f" (to run a Python script, name the interpreter: tfring run -np N python {' '.join(command)})"
    return f"tfring run: cannot start {command[0]!r}: {error.strerror or error}{hint}"


class StartError(RuntimeError):
    """The command could not be started (not found, not executable): a one-line message.

    Example:

    >>> raise StartError("tfring run: cannot start 'train.py': Permission denied")
    """


class Job:
    """A running job: its processes and the threads copying their output."""

    def __init__(self, command, num_processes, timeout=None, all_output=False, env=None):
        self.command = list(command)
        self.slots = plan_slots(num_processes)
        self.timeout = timeout
        self.all_output = all_output
        self._warnings = WarningsOnce()
        self.base_env = dict(os.environ if env is None else env)
        self.procs = []
        self.threads = []
        self.started = False
        self.pending_signal = None  # a signal that arrived before every process was started

    def _env(self, slot, store_addr, secret, job_id, pipe_fd):
        env = dict(self.base_env)
        env.update({
            cluster.LAUNCHER_FD: str(pipe_fd),
            cluster.RANK: str(slot.rank), cluster.SIZE: str(len(self.slots)),
            cluster.LOCAL_RANK: str(slot.local_rank), cluster.LOCAL_SIZE: str(slot.local_size),
            cluster.STORE_ADDR: store_addr, cluster.SECRET: secret, cluster.JOB_ID: job_id,
            "PYTHONUNBUFFERED": "1",
        })
        if self.timeout is not None:
            env["TFRING_TIMEOUT"] = str(self.timeout)
        return env

    def start(self):
        store_addr = f"127.0.0.1:{free_port()}"
        secret = secrets.token_hex(32)
        job_id = secrets.token_hex(6)
        # Each rank gets the read end of a pipe whose write end only this process holds: tfring.init()
        # exits when it reads EOF, which reaches ranks behind a shell wrapper too (PR_SET_PDEATHSIG
        # only reaches the direct child).
        watch_fd, self.lifeline = os.pipe()
        os.set_inheritable(self.lifeline, False)
        try:
            self._start_ranks(store_addr, secret, job_id, watch_fd)
        finally:
            os.close(watch_fd)

    def _start_ranks(self, store_addr, secret, job_id, watch_fd):
        for slot in self.slots:
            try:
                proc = subprocess.Popen(self.command, env=self._env(slot, store_addr, secret, job_id, watch_fd),
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(watch_fd,),
                                        start_new_session=True, preexec_fn=_die_with(os.getpid()))
            except OSError as e:
                self.terminate()
                raise StartError(_cannot_start(self.command, e)) from e
            self.procs.append(proc)
            show_stdout = self.all_output or slot.rank == 0
            for stream, sink, show in ((proc.stdout, sys.stdout, show_stdout), (proc.stderr, sys.stderr, True)):
                keep = None if self.all_output else self._warnings.filter()  # one per stream
                t = threading.Thread(target=_pump, args=(stream, slot.rank, sink, show, keep), daemon=True)
                t.start()
                self.threads.append(t)

    def signal_all(self, signum):
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signum)
                except ProcessLookupError:
                    pass

    def terminate(self):
        """SIGTERM to every live process, SIGKILL to those still alive after the grace period."""
        self.signal_all(signal.SIGTERM)
        deadline = time.monotonic() + KILL_GRACE_SECONDS
        while time.monotonic() < deadline and any(p.poll() is None for p in self.procs):
            time.sleep(POLL_SECONDS)
        self.signal_all(signal.SIGKILL)
        for p in self.procs:
            p.wait()

    def wait(self):
        """Waits for the job; returns the exit code of the launcher."""
        failed = None
        while True:
            codes = [p.poll() for p in self.procs]
            bad = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                failed = bad[0]
                break
            if all(c == 0 for c in codes):
                break
            time.sleep(POLL_SECONDS)
        if failed is not None:
            rank, code = failed
            others = [p for p in self.procs if p.poll() is None]
            if others:
                sys.stderr.write(f"tfring run: rank {rank} exited with code {code}; stopping the other ranks\n")
                sys.stderr.flush()
            self.terminate()
        for t in self.threads:
            t.join(timeout=5)
        if failed is None:
            return 0
        code = failed[1]
        return 128 - code if code < 0 else code


def run(command, num_processes, timeout=None, all_output=False):
    """Runs `command` as `num_processes` ranks on this host and returns the launcher's exit code.

    Args:
        command: the program and its arguments, e.g. `["python", "train.py"]`.
        num_processes: the job size.
        timeout: seconds a collective may stall (passed to the ranks as TFRING_TIMEOUT).
        all_output: show every rank's stdout, not only rank 0's (stderr is always shown).

    Returns:
        0 when every rank exited 0, else the first failing rank's code (128+N for signal N).

    Example:

    >>> run(["python", "-c", "import tfring; print(tfring.size())"], 2)
    [0] 2
    0
    """
    if not command:
        raise ValueError("tfring run: no command given")
    job = Job(command, num_processes, timeout=timeout, all_output=all_output)

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
