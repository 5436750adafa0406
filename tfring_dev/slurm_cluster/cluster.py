"""SlurmCluster: a real SLURM (munged, slurmctld, slurmd) on this machine, for tests."""

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from tfring_dev.slurm_cluster import config, leftovers

PACKAGES = "slurmctld slurmd slurm-client munge"
CLIENTS = ("srun", "sbatch", "sinfo", "squeue", "scontrol", "scancel")
DAEMONS = ("munged", "munge", "slurmctld", "slurmd", "slurmstepd")
_SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
_ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE",
          "PREEMPTED")


class SlurmUnavailable(RuntimeError):
    """This machine cannot run the cluster (not root, a package missing): the message says which."""


def _which(name):
    return shutil.which(name) or shutil.which(name, path=_SYSTEM_PATH)


def _wait(predicate, timeout, what, poll=0.1, detail=None):
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"SlurmCluster: timed out after {timeout:.0f} s waiting for {what}"
                               + (detail() if detail else ""))
        time.sleep(poll)


class SlurmCluster:
    """A SLURM cluster on this machine, its files in a temporary directory, entered as a context.

    One node (this machine) by default; given entered `EmulatedHosts`, one node per emulated host,
    each slurmd in its host's network namespace under its hostname, slurmctld and munged in the root
    namespace on the bridge. Everything started is stopped on leaving (also on an exception or at
    interpreter exit), the tasks and slurmstepds included; clusters of a dead owner are cleaned up
    when the next one starts.

    Args:
        emulated_hosts: an entered `tfring_dev.emulated_hosts.EmulatedHosts`, or None for one local node.
        cpus: CPUs= per node (oversubscribed on purpose).
        timeout: seconds each daemon has to come up.

    Raises:
        SlurmUnavailable: on entry, without root or without the Debian packages (`PACKAGES`).

    Example:

    >>> with SlurmCluster() as slurm:
    ...     slurm.srun(["-n", "2", "hostname"]).returncode
    0
    """

    def __init__(self, emulated_hosts=None, cpus=4, timeout=30.0):
        self._hosts, self.cpus, self.timeout = emulated_hosts, cpus, timeout
        self.dir = None
        self.node_names = []
        self._procs = {}  # name -> Popen of each daemon

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    @property
    def conf(self):
        return self.path("etc", "slurm.conf")

    @property
    def env(self):
        """The environment for client commands: ours, without the SLURM_* of any job around us."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SLURMD_", "SBATCH_", "SALLOC_"))}
        env["PATH"] = env.get("PATH", "") + ":" + _SYSTEM_PATH
        env["SLURM_CONF"] = self.conf
        return env

    def __enter__(self):
        if os.geteuid() != 0:
            raise SlurmUnavailable(f"a local SLURM cluster needs root; this is uid {os.geteuid()}")
        missing = [b for b in CLIENTS + DAEMONS if not _which(b)]
        if missing:
            raise SlurmUnavailable(f"missing {', '.join(missing)}: apt-get install {PACKAGES}")
        leftovers.cleanup_stale()
        self._owner = os.getpid()
        atexit.register(self._close_at_exit)
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def _close_at_exit(self):
        if os.getpid() == self._owner:
            with contextlib.suppress(Exception):
                self.close()

    def _start(self):
        self.dir = tempfile.mkdtemp(prefix=leftovers.DIR_PREFIX)
        os.chmod(self.dir, 0o755)  # munged wants every directory above its socket world-searchable
        with open(self.path("owner"), "w") as f:
            f.write(f"{os.getpid()} {leftovers.start_time(os.getpid())}\n")
        for sub in ("etc", "munge", "state", "spool", "log", "out"):
            os.makedirs(self.path(sub), mode=0o755)
        open(self.path("etc", "plugstack.conf"), "w").close()  # not the system's plugstack
        if self._hosts is None:
            controller, nodes = "127.0.0.1", [(socket.gethostname().split(".")[0], "127.0.0.1")]
        else:
            controller, nodes = self._hosts.gateway, list(zip(self._hosts.names, self._hosts.addresses))
            with open(self.path("etc", "hosts"), "w") as f:
                f.write(config.hosts_file(controller, nodes))
        self.node_names = [n for n, _ in nodes]
        self._start_munged()
        with open(self.conf, "w") as f:
            f.write(config.slurm_conf(self.dir, controller, nodes, self.cpus, self.path("munge", "munge.socket")))
        self._start_slurmctld()
        for i, name in enumerate(self.node_names):
            os.makedirs(self.path("spool", name), mode=0o755, exist_ok=True)
            self._popen(f"slurmd-{name}", [_which("slurmd"), "-D", "-N", name, "-f", self.conf], self._node_prefix(i))
        self.wait_idle(check_daemons=True)

    def _popen(self, name, argv, prefix=()):
        with open(self.path("log", name + ".stdout"), "ab") as out:
            self._procs[name] = subprocess.Popen(list(prefix) + argv, stdin=subprocess.DEVNULL, stdout=out,
                                                 stderr=subprocess.STDOUT, env=self.env, start_new_session=True)

    def _start_munged(self):
        key = self.path("etc", "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        socket_path = self.path("munge", "munge.socket")
        self._popen("munged", [_which("munged"), "--foreground", f"--key-file={key}", f"--socket={socket_path}",
                               f"--pid-file={self.path('munge', 'munged.pid')}",
                               f"--log-file={self.path('log', 'munged.log')}",
                               f"--seed-file={self.path('munge', 'munged.seed')}"])

        def ready():
            self._check_alive("munged")
            return subprocess.run([_which("munge"), "-n", f"--socket={socket_path}"], capture_output=True,
                                  timeout=5).returncode == 0

        _wait(ready, self.timeout, "munged", poll=0.02, detail=lambda: self._tail("munged.log"))

    def _start_slurmctld(self):
        self._popen("slurmctld", [_which("slurmctld"), "-D", "-c", "-i", "-f", self.conf])

        def ready():
            self._check_alive("slurmctld")
            r = self.run([_which("scontrol"), "ping"], timeout=10)
            return r.returncode == 0 and "is UP" in r.stdout

        _wait(ready, self.timeout, "slurmctld", poll=0.05, detail=lambda: self._tail("slurmctld.log"))

    def _node_prefix(self, i):
        """How to run a command as emulated host i: its network namespace, its hostname, and an
        /etc/hosts naming every node (bind-mounted in a private mount namespace).

        Not `EmulatedHosts.popen`: `ip netns exec` remounts /sys, leaving /sys/fs/cgroup empty, and
        slurmd 22.05 then refuses to start ("Unable to initialize cgroup plugin") even without cgroups.
        """
        if self._hosts is None:
            return ()
        return [_which("nsenter"), f"--net=/run/netns/{self._hosts.namespaces[i]}", "--",
                _which("unshare"), "--uts", "--mount", "--", "/bin/sh", "-c",
                'mount --bind "$1" /etc/hosts && hostname "$0" && shift && exec "$@"',
                self._hosts.names[i], self.path("etc", "hosts")]

    def wait_idle(self, timeout=None, check_daemons=False):
        """Waits until every node is idle (a job asked for while the last one is completing waits 1-3 s)."""
        def ready():
            if check_daemons:
                for name in self.node_names:
                    self._check_alive(f"slurmd-{name}")
            states = self.node_states()
            return all(states.get(n) == "idle" for n in self.node_names)

        _wait(ready, timeout or self.timeout, "every node idle", poll=0.05,
              detail=lambda: f": {self.node_states()}" + "".join(self._tail(f"slurmd-{n}.log") for n in self.node_names))

    def node_states(self):
        r = self.run([_which("sinfo"), "-h", "-N", "-o", "%N %T"], timeout=10)
        return dict(line.split() for line in r.stdout.splitlines() if len(line.split()) == 2)

    def _check_alive(self, name):
        proc = self._procs[name]
        if proc.poll() is not None:
            log = "munged.log" if name == "munged" else f"{name}.log"
            raise RuntimeError(f"{name} exited with {proc.returncode}" + self._tail(f"{name}.stdout") + self._tail(log))

    def _tail(self, log, lines=15):
        with contextlib.suppress(OSError):
            with open(self.path("log", log), errors="replace") as f:
                return f"\n--- {log}:\n" + "".join(f.readlines()[-lines:])
        return ""

    def run(self, argv, timeout=60, env=None, **kwargs):
        """Runs a SLURM client command against this cluster (`subprocess.run`, text, captured)."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        return subprocess.run(argv, timeout=timeout, env=dict(self.env, **(env or {})), **kwargs)

    def srun(self, args, timeout=120, env=None):
        """`srun ARGS` once every node is idle; returns the finished process."""
        self.wait_idle()
        return self.run([_which("srun")] + list(args), timeout=timeout, env=env)

    def sbatch(self, script_text, args=(), timeout=120, env=None):
        """Submits a batch script, waits for it to end; returns (final state, its output)."""
        self.wait_idle()
        script = self.path("out", f"job-{time.monotonic_ns()}.sh")
        with open(script, "w") as f:
            f.write(script_text)
        out = self.path("out", "slurm-%j.out")
        r = self.run([_which("sbatch"), "--parsable", "-o", out, *args, script], timeout=30, env=env, check=True)
        job = r.stdout.strip().split(";")[0]
        state = _wait(lambda: (s := self._job_state(job)) in _ENDED and s, timeout, f"job {job}", poll=0.1)
        with open(out.replace("%j", job)) as f:
            return state, f.read()

    def _job_state(self, job):
        r = self.run([_which("scontrol"), "-o", "show", "job", job], timeout=10)
        return next((f.split("=", 1)[1] for f in r.stdout.split() if f.startswith("JobState=")), None)

    def close(self):
        """Stops everything started here and removes the directory; safe to call twice.

        Raises:
            RuntimeError: a process survived SIGKILL (named).
        """
        atexit.unregister(self._close_at_exit)
        if self.dir is None:
            return
        self._cancel_jobs()
        problems = [self._stop(name) for name in
                    [n for n in self._procs if n.startswith("slurmd-")] + ["slurmctld", "munged"]]
        left = leftovers.kill_marked(self.conf)  # slurmstepds (double-forked: not ours) and their tasks
        problems.append(f"processes {left} survived SIGKILL" if left else None)
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None
        problems = [p for p in problems if p]
        if problems:
            raise RuntimeError("SlurmCluster teardown: " + "; ".join(problems))

    def _cancel_jobs(self):
        ctld = self._procs.get("slurmctld")
        if ctld is None or ctld.poll() is not None:
            return
        with contextlib.suppress(Exception):
            self.run([_which("scancel"), "--quiet", "-u", "root"], timeout=10)
            _wait(lambda: not self.run([_which("squeue"), "-h", "-t", "PD,R,CG,S"], timeout=10).stdout.strip(),
                  5, "jobs to end")

    def _stop(self, name):
        """SIGTERM, then SIGKILL to the daemon's process group; a message if it survives."""
        proc = self._procs.get(name)
        if proc is None or proc.poll() is not None:
            return None
        proc.terminate()
        try:
            proc.wait(timeout=10)
            return None
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        try:
            proc.wait(timeout=5)
            return None
        except subprocess.TimeoutExpired:
            return f"{name} (pid {proc.pid}) survived SIGKILL"
