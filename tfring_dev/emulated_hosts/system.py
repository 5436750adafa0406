"""What emulated hosts need from this machine, and the few system calls they make.

`available()` says whether root, iproute2, util-linux and openssh-server are here; the rest runs
short commands (`ip`, `tc`) and finds and kills the processes of a network namespace.
"""

import contextlib
import os
import shutil
import signal
import subprocess
import time

NETNS_DIR = "/run/netns"  # where `ip netns add` binds each namespace
SSHD = "/usr/sbin/sshd"  # sshd re-executes itself, so it must be started by its absolute path
_TOOLS = {"ip": "iproute2", "tc": "iproute2", "unshare": "util-linux", "ssh": "openssh-client",
          "ssh-keygen": "openssh-client"}


class EmulatedHostsUnavailable(RuntimeError):
    """Emulated hosts cannot be built here; `reason` says what is missing.

    Args:
        reason: what is missing and how to get it, e.g. "emulated hosts need root".

    Example:

    >>> try:
    ...     hosts = EmulatedHosts(2).__enter__()
    ... except EmulatedHostsUnavailable as e:
    ...     pytest.skip(e.reason)
    """

    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


def available():
    """Tells whether `EmulatedHosts` can be built here, and if not, why.

    Returns:
        `(True, "")`, or `(False, reason)` where `reason` names what is missing (root, a tool and
        its Debian package, network namespace support).

    Example:

    >>> ok, reason = available()
    >>> if not ok:
    ...     pytest.skip(reason)
    """
    if os.geteuid() != 0:
        return False, f"emulated hosts need root (namespaces, veths, tc); this is uid {os.geteuid()}"
    missing = [f"`{tool}` ({package})" for tool, package in _TOOLS.items() if not shutil.which(tool)]
    if not os.access(SSHD, os.X_OK):
        missing.append(f"{SSHD} (openssh-server)")
    if missing:
        return False, (f"emulated hosts need {', '.join(missing)}: "
                       f"apt-get install iproute2 util-linux openssh-server")
    probe = run_command(["ip", "netns", "list"], check=False)
    if probe.returncode != 0:
        return False, f"`ip netns list` fails here (no network namespaces?): {probe.stderr.strip()}"
    return True, ""


def tool(name):
    """The absolute path of a system tool (`ip`, `unshare`), or its bare name if not on PATH."""
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin:/sbin:/bin") or name


def run_command(argv, check=True, unavailable=None, timeout=10.0, **kwargs):
    """Runs a short system command and returns its CompletedProcess (text output captured).

    A failure raises RuntimeError with the command's stderr; with `unavailable` (what the failure
    means, e.g. "the kernel refuses veths") it raises EmulatedHostsUnavailable instead, so that
    tests skip where the machine, not tfring, is at fault.
    """
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kwargs)
    if check and result.returncode != 0:
        message = f"`{' '.join(argv)}` failed ({result.returncode}): {result.stderr.strip()}"
        raise EmulatedHostsUnavailable(f"{unavailable}: {message}") if unavailable else RuntimeError(message)
    return result


def ip_batch(options, commands, unavailable):
    """Runs several `ip` commands in one process (`ip -batch`): a few hosts take milliseconds."""
    run_command(["ip"] + options + ["-batch", "-"], input="\n".join(commands) + "\n", unavailable=unavailable)


def list_namespaces():
    """The names of the network namespaces `ip netns` knows."""
    try:
        return sorted(os.listdir(NETNS_DIR))
    except FileNotFoundError:
        return []


def root_links():
    """The names of the interfaces in this (the root) network namespace."""
    lines = run_command(["ip", "-o", "link", "show"]).stdout.splitlines()
    return [line.split(":")[1].strip().split("@")[0] for line in lines]


def namespace_pids(namespace):
    """The pids of the processes in `namespace`, as `ip netns pids` finds them, without a process.

    Each /proc/<pid>/ns/net is compared with the namespace's bind mount. A zombie has no namespace
    any more, so it is not listed.
    """
    try:
        target = os.stat(os.path.join(NETNS_DIR, namespace))
    except OSError:
        return []
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                st = os.stat(f"/proc/{entry}/ns/net")
                if (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino):
                    pids.append(int(entry))
    return pids


def kill_all(namespace, deadline):
    """SIGKILLs every process in `namespace` until none is left; returns those alive at `deadline`."""
    while True:
        pids = namespace_pids(namespace)
        for pid in pids:  # listed again each round: a process may fork between listing and kill
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if not pids or time.monotonic() > deadline:
            return pids
        time.sleep(0.01)


def process_name(pid):
    """The process's name (/proc/<pid>/comm), or "" when it is gone."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def start_time(pid):
    """When the process started (clock ticks since boot): with the pid, it names one process."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, counted after the name's ')'
