"""One rank on another host, as the launcher sees it: an ssh process talking to `tfring.launch.remote`.

Nothing secret goes on the ssh command line: the rank's environment (the job secret among it)
travels over the channel (see remote.py for the conversation). Stopping works through the channel
too: "signal N" lines for SIGINT/SIGTERM, and closing it kills the rank; when the launcher dies,
the ssh client dies with it (PR_SET_PDEATHSIG) and the channel closes the same way.
"""

import json
import math
import os
import shlex
import signal
import subprocess
import threading

from tfring.launch import local_rank
from tfring.launch import membership
from tfring.launch import remote

DEFAULT_RSH = "ssh -o BatchMode=yes"
# A host that goes silent (power, network) ends ssh within ~15 s, so the job stops as for a dead rank.
_KEEPALIVE = ["-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3"]
# Variables the interpreter needs before it starts (to find tfring); none of them is secret.
_INTERPRETER_ENV = ("PYTHONPATH", "VIRTUAL_ENV", "LD_LIBRARY_PATH")
# Seconds ssh has to end once its channel is closed before it is killed.
SSH_EXIT_GRACE = 2.0


def ssh_prefix(rsh=None, port=None, identity_file=None, connect_timeout=30):
    """The command that runs a command on another host, before the host's name.

    Args:
        rsh: replaces the whole default `ssh -o BatchMode=yes` (e.g. "ssh -F ./ssh_config").
        port: `ssh -p PORT`.
        identity_file: `ssh -i FILE`.
        connect_timeout: seconds ssh may take to connect (the default command only).

    Returns:
        A list of arguments.

    Example:

    >>> ssh_prefix(port=2222)[-2:]
    ['-p', '2222']
    """
    timeout = ["-o", f"ConnectTimeout={max(1, math.ceil(connect_timeout))}"]
    prefix = shlex.split(rsh) if rsh else shlex.split(DEFAULT_RSH) + timeout + _KEEPALIVE
    if port is not None:
        prefix += ["-p", str(port)]
    if identity_file:
        prefix += ["-i", identity_file]
    return prefix


def remote_command(cwd, python, environ):
    """The shell command run on the other host: the same directory and interpreter as here.

    Args:
        cwd: the working directory (a shared file system is assumed).
        python: the interpreter that runs `tfring.launch.remote`.
        environ: the launcher's environment (only the interpreter's search paths are taken).

    Returns:
        One string, as ssh passes it to the remote shell.
    """
    assignments = [f"{k}={shlex.quote(environ[k])}" for k in _INTERPRETER_ENV if environ.get(k)]
    return " ".join(["cd", shlex.quote(cwd), "&&", "exec", "env"] + assignments +
                    [shlex.quote(python), "-u", "-m", "tfring.launch.remote"])


class RemoteRank:
    """A rank started over ssh; same interface as `local_rank.LocalRank`.

    Args:
        slot: the rank's `hosts.Slot`.
        prefix: `ssh_prefix(...)`.
        command: `remote_command(...)`.

    Raises:
        OSError: the ssh command itself cannot be started.
    """

    def __init__(self, slot, prefix, command):
        self.slot = slot
        self.reply = None
        self._store_turns = 0  # stores served as rank 0 so far
        self.ready = threading.Event()
        self._early_stderr = []
        self._stderr_take = None
        self._stderr_done = threading.Event()
        self._lock = threading.Lock()  # the main thread writes and reads what the pump threads keep
        self.proc = subprocess.Popen(prefix + [slot.host, command], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                     preexec_fn=local_rank.die_with(os.getpid()))

    def _write(self, text):
        with self._lock:
            try:
                self.proc.stdin.write(text.encode())
                self.proc.stdin.flush()
            except (ValueError, OSError):  # the far end is gone (its exit is seen by poll)
                pass

    def store_port(self):
        """A port for the store this rank serves as rank 0: the far end's two, in turn (a rank that
        goes on in place never serves a new store on its last one's port)."""
        self._store_turns += 1
        return self.reply["ports"][(self._store_turns - 1) % 2]

    def request(self, interface, want_port):
        """Step 1: asks the far end what it runs and where it is."""
        self._write(json.dumps({"interface": interface, "want_port": want_port}) + "\n")

    def send_job(self, env, command, bind_to="none"):
        """Step 3: the rank's environment and command, and how to bind it to cores; the rank starts."""
        slot = vars(self.slot)
        self._write(json.dumps({"env": env, "command": list(command), "slot": slot, "bind_to": bind_to}) + "\n")

    def pump_stdout(self, take):
        """Reads ssh's stdout until EOF: the ready line, then the rank's output (run in a thread)."""
        mark = remote.READY_MARK.encode()
        for line in iter(self.proc.stdout.readline, b""):
            at = line.find(mark) if not self.ready.is_set() else -1
            if at < 0:
                take(line)
                continue
            if at:
                take(line[:at] + b"\n")  # a login script's text without a newline
            try:
                self.reply = json.loads(line[at + len(mark):])
            except ValueError:
                with self._lock:
                    self._early_stderr.append(b"garbled answer: " + line[:200])
            self.ready.set()
        self.proc.stdout.close()
        self.ready.set()  # an end before the ready line wakes the launcher too

    def pump_stderr(self, take):
        """Reads ssh's stderr until EOF; lines before the ready line are kept for the start error."""
        for line in iter(self.proc.stderr.readline, b""):
            with self._lock:
                if self._stderr_take is None:
                    self._early_stderr.append(line)
                    continue
            take(line)
        self.proc.stderr.close()
        self._stderr_done.set()

    def start_stderr(self, take):
        """From now on stderr lines are the rank's: show the ones kept so far and pass on the rest."""
        with self._lock:
            for line in self._early_stderr:
                take(line)
            self._early_stderr = []
            self._stderr_take = take

    def start_error(self, timeout):
        """Why the far end did not answer: ssh's own words, or the time waited."""
        try:  # ssh may have just ended: let its last words arrive
            self.proc.wait(SSH_EXIT_GRACE)
            self._stderr_done.wait(SSH_EXIT_GRACE)
        except subprocess.TimeoutExpired:
            pass
        with self._lock:
            said = b"".join(self._early_stderr).decode(errors="replace").strip()
        if said:
            return said.replace("\n", "; ")
        if self.proc.poll() is not None:
            return f"ssh exited with code {self.proc.returncode} without a word"
        return f"no answer within {timeout:g} s (--start-timeout)"

    def poll(self):
        """The exit code once ssh has ended (the rank's, or 255 when ssh lost the host), else None."""
        code = self.proc.poll()
        return None if code is None else local_rank.exit_code(code)

    def signal(self, signum):
        """Asks the far end to send `signum` to the rank's process group."""
        if self.proc.poll() is None:
            self._write(f"signal {int(signum)}\n")

    def notify(self):
        """Asks the far end to tell the rank the job may grow (`LocalRank.notify` there)."""
        if self.proc.poll() is None:
            self._write("notify\n")

    def reform(self, env):
        """Asks the far end to give the rank its place in the job's next membership (`LocalRank.reform` there)."""
        if self.proc.poll() is None:
            self._write(f"membership {membership.encode(env).hex()}\n")

    def kill(self):
        """Closes the channel: the far end kills the rank and exits, and ssh with it."""
        with self._lock:
            try:
                self.proc.stdin.close()
            except OSError:
                pass

    def force(self):
        """Kills ssh itself (a host that no longer answers cannot close the channel)."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def wait(self, timeout=None):
        """Waits for ssh to end and returns the exit code."""
        self.proc.wait(timeout)
        return self.poll()

    def describe_failure(self, code):
        """One line for the launcher: which rank failed, on which host, and how."""
        where = f"rank {self.slot.rank} on host {self.slot.host}"
        if code == 255:
            return f"lost the connection to {where} (ssh exited 255)"
        return f"{where} exited with code {code}"
