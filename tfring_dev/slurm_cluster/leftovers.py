"""What a SlurmCluster leaves behind, found by marker: processes carrying its SLURM_CONF, clusters
whose owner died, and any munged/slurm process still alive (for tests' "nothing left" checks)."""

import contextlib
import glob
import os
import shutil
import signal
import tempfile
import time

DIR_PREFIX = "slurm-cluster-"


def start_time(pid):
    """When process `pid` started (clock ticks since boot): tells a reused pid apart."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])


def _alive(pid, start):
    """Whether process `pid` that started at `start` still runs (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z" and int(fields[19]) == start


def marked_pids(conf):
    """Processes whose environment holds SLURM_CONF=<conf>: every daemon we start, the slurmstepds
    (slurmd double-forks them: no children of ours), their tasks, srun clients of that cluster."""
    marker = f"SLURM_CONF={conf}".encode()
    me = {os.getpid(), os.getppid()}
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in me:
            continue
        with contextlib.suppress(OSError):
            with open(f"/proc/{entry}/environ", "rb") as f:  # a zombie's reads as empty
                if marker in f.read().split(b"\0"):
                    pids.append(int(entry))
    return pids


def kill_marked(conf, timeout=5.0):
    """SIGKILLs the processes marked with `conf` until none is left; returns those alive at timeout."""
    deadline = time.monotonic() + timeout
    while True:
        pids = marked_pids(conf)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if not pids or time.monotonic() > deadline:
            return pids
        time.sleep(0.05)


def cleanup_stale():
    """Kills what clusters whose owner process is gone (SIGKILLed test run) left, removes their dirs.

    Their emulated hosts, if any, are EmulatedHosts' own business (it cleans up stale ones itself).
    """
    for owner_file in glob.glob(os.path.join(tempfile.gettempdir(), DIR_PREFIX + "*", "owner")):
        d = os.path.dirname(owner_file)
        with contextlib.suppress(OSError, ValueError):
            with open(owner_file) as f:
                pid, start = (int(x) for x in f.read().split())
            if not _alive(pid, start):
                kill_marked(os.path.join(d, "etc", "slurm.conf"))
                shutil.rmtree(d, ignore_errors=True)


def stray_processes():
    """Live (non-zombie) munged/slurm* processes on this machine: [(pid, state, cmdline)].

    Zombies are left out: slurmd double-forks slurmstepd, so a finished slurmstepd is re-parented
    to PID 1 and shows as `[slurmstepd] <defunct>` in `pgrep -a slurm` until PID 1 reaps it.
    """
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            name, state = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2]
            if state != "Z" and (name.startswith("slurm") or name.startswith("munge")):
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    found.append((int(entry), state, f.read().replace(b"\0", b" ").decode(errors="replace")))
    return found
