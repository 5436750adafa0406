"""What each EmulatedHosts instance owns on this machine, and how it is all removed.

An instance is a random 6-hex-digit tag. Its namespaces and root-namespace interfaces are named
`tfh<tag>...` (at most 15 characters, the kernel's limit for interface names), and its keys,
configs and logs live in `/run/tfring-emulated-hosts/<tag>/` beside `owner.json`, the pid and start
time of the process that made it. The directory is made, under a lock, before anything else and
removed after everything else: so an instance whose owner no longer runs is stale, and whatever
carries its tag can go (`cleanup_stale`).
"""

import contextlib
import fcntl
import ipaddress
import json
import os
import re
import secrets
import shutil
import subprocess
import time

from tfring_dev.emulated_hosts import system

STATE_ROOT = "/run/tfring-emulated-hosts"  # /run is emptied at boot, when the namespaces go too
PREFIX = "tfh"
_OWN_NAME = re.compile(PREFIX + "([0-9a-f]{6})")
_TEARDOWN_TIMEOUT = 5.0


def new_tag():
    """A fresh instance tag: 6 random hex digits."""
    return secrets.token_hex(3)


def state_dir(tag):
    """The instance's private directory (mode 0700): keys, configs, logs, owner file."""
    return os.path.join(STATE_ROOT, tag)


def claim(tag):
    """Removes stale instances, then makes `tag`'s directory and owner file; returns its /24.

    Under the lock, so that cleanup_stale() elsewhere never mistakes an instance being built for a
    stale one, and two instances never pick the same subnet.
    """
    with _state_lock():
        _remove_stale_locked()
        os.mkdir(state_dir(tag), 0o700)
        network = _free_subnet()
        owner = {"pid": os.getpid(), "start": system.start_time(os.getpid()), "subnet": str(network)}
        with open(os.path.join(state_dir(tag), "owner.json"), "w") as f:
            json.dump(owner, f)
    return network


def release(tag, children=()):
    """Removes everything of instance `tag`; returns what could not be removed (often nothing).

    Args:
        tag: the instance.
        children: Popen objects of its processes, reaped once killed so that none stays a zombie.
    """
    problems = remove_instance(tag, children)
    with _state_lock():
        _remove_root_if_empty()
    return problems


def cleanup_stale():
    """Removes what instances left behind when their owner process died without tearing down.

    An instance is stale when the process that made it (pid and start time, in its owner file) no
    longer runs; its processes, namespaces, interfaces and files are removed. Every new
    `EmulatedHosts` calls this first. Live instances are not touched.

    Returns:
        The tags of the stale instances removed (often `[]`).

    Raises:
        RuntimeError: something of a stale instance could not be removed; the message says what.

    Example:

    >>> cleanup_stale()
    []
    """
    with _state_lock():
        removed = _remove_stale_locked()
        _remove_root_if_empty()
    return removed


def _remove_stale_locked():
    names = system.list_namespaces() + system.root_links()
    tags = set(os.listdir(STATE_ROOT)) | {m.group(1) for m in map(_OWN_NAME.match, names) if m}
    stale = sorted(tag for tag in tags if not _owner_alive(tag))
    problems = [p for tag in stale for p in remove_instance(tag)]
    if problems:
        raise RuntimeError("cleanup_stale: could not remove " + "; ".join(problems))
    return stale


def remove_instance(tag, children=()):
    """Kills the instance's processes, deletes its links, namespaces and directory; returns leftovers."""
    own = PREFIX + tag
    namespaces = [ns for ns in system.list_namespaces() if ns.startswith(own)]
    deadline = time.monotonic() + _TEARDOWN_TIMEOUT
    problems = [f"processes {pids} in {ns}" for ns in namespaces if (pids := system.kill_all(ns, deadline))]
    for child in children:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
    # Veths before the bridge; deleting a veth's root end deletes its end in the namespace too.
    links = [link for link in system.root_links() if link.startswith(own)]
    for link in sorted(links, key=lambda link: link.endswith("br")):
        system.run_command(["ip", "link", "del", link], check=False)
    for ns in namespaces:
        system.run_command(["ip", "netns", "del", ns], check=False)
    problems += [f"link {link}" for link in system.root_links() if link.startswith(own)]
    problems += [f"namespace {ns}" for ns in system.list_namespaces() if ns.startswith(own)]
    shutil.rmtree(state_dir(tag), ignore_errors=True)
    if os.path.exists(state_dir(tag)):
        problems.append(f"directory {state_dir(tag)}")
    return problems


def _owner_alive(tag):
    try:
        with open(os.path.join(state_dir(tag), "owner.json")) as f:
            owner = json.load(f)
        return system.start_time(owner["pid"]) == owner["start"]  # the start time tells a reused pid
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _free_subnet():
    """A random 10.X.Y.0/24 that overlaps no address, route or other instance on this machine."""
    used = []
    for line in system.run_command(["ip", "-4", "-o", "addr", "show"]).stdout.splitlines():
        used.append(ipaddress.ip_interface(line.split()[3]).network)
    for line in system.run_command(["ip", "-4", "route", "show"]).stdout.splitlines():
        with contextlib.suppress(ValueError):
            used.append(ipaddress.ip_network(line.split()[0]))  # "default" is not a network
    for tag in os.listdir(STATE_ROOT):  # instances still being built have no address yet
        with contextlib.suppress(OSError, ValueError, KeyError):
            with open(os.path.join(state_dir(tag), "owner.json")) as f:
                used.append(ipaddress.ip_network(json.load(f)["subnet"]))
    for _ in range(1000):
        network = ipaddress.ip_network(f"10.{1 + secrets.randbelow(254)}.{secrets.randbelow(256)}.0/24")
        if not any(network.overlaps(u) for u in used):
            return network
    raise RuntimeError("EmulatedHosts: found no 10.X.Y.0/24 that no interface or route here uses")


@contextlib.contextmanager
def _state_lock(timeout=30.0):
    """Holds the lock (flock on the state root) under which instances are claimed and removed."""
    deadline = time.monotonic() + timeout
    while True:
        os.makedirs(STATE_ROOT, mode=0o700, exist_ok=True)
        fd = os.open(STATE_ROOT, os.O_RDONLY | os.O_DIRECTORY)
        try:
            _flock(fd, deadline, timeout)
            # Another process may have removed the (empty) root while we waited: lock the new one.
            if _same_file(STATE_ROOT, fd):
                yield
                return
        finally:
            os.close(fd)  # releases the lock


def _flock(fd, deadline, timeout):
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"EmulatedHosts: {STATE_ROOT} stayed locked for {timeout:g} s") from None
            time.sleep(0.01)


def _same_file(path, fd):
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def _remove_root_if_empty():
    with contextlib.suppress(OSError):  # not empty: another instance lives
        os.rmdir(STATE_ROOT)
