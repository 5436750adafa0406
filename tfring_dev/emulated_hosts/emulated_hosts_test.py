"""Tests of EmulatedHosts on this machine: reachability, ssh, shaping, failures, and teardown.

They need root, iproute2 and openssh-server, and skip saying which is missing. Each builds its own
hosts (a few hundred milliseconds) so that none depends on another's leftovers.
"""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from tfring_dev import emulated_hosts
from tfring_dev.emulated_hosts import EmulatedHosts
from tfring_dev.emulated_hosts import sshd

# Python in the hosts: isolated and without site-packages, so each starts in tens of milliseconds.
PY = [sys.executable, "-I", "-S", "-c"]

ECHO_SERVER = """
import socket, sys
s = socket.create_server((sys.argv[1], 5000)); print("ready", flush=True)
while True:
    c, _ = s.accept(); c.sendall(c.recv(64)); c.close()
"""

ECHO_CLIENT = """
import socket, sys
try:
    with socket.create_connection((sys.argv[1], 5000), timeout=float(sys.argv[2])) as c:
        c.sendall(b"ping"); print(c.recv(64).decode())
except OSError as e:
    print("failed:", e); sys.exit(1)
"""

# Receives until EOF; prints Mbit/s from its first to its last byte (what the link carried, not
# what the sender's socket buffer swallowed).
BULK_RECEIVER = """
import socket, sys, time
s = socket.create_server((sys.argv[1], 5001)); print("ready", flush=True)
c, _ = s.accept(); n = 0; first = None
while b := c.recv(1 << 20):
    if first is None: first, head = time.monotonic(), len(b)
    n += len(b)
print((n - head) * 8 / (time.monotonic() - first) / 1e6, flush=True)
"""

BULK_SENDER = """
import socket, sys
with socket.create_connection((sys.argv[1], 5001), timeout=10) as c:
    for _ in range(int(sys.argv[2])): c.sendall(b"x" * (1 << 20))
"""


def hosts_or_skip(num_hosts, **kwargs):
    ok, reason = emulated_hosts.available()
    if not ok:
        pytest.skip(reason)
    return EmulatedHosts(num_hosts, **kwargs)


def start_server(hosts, i, source):
    server = hosts.popen(i, PY + [textwrap.dedent(source), hosts.addresses[i]], stdout=subprocess.PIPE, text=True)
    assert server.stdout.readline().strip() == "ready"
    return server


def echo(hosts, i, address, timeout=2.0):
    return hosts.run(i, PY + [textwrap.dedent(ECHO_CLIENT), address, str(timeout)], capture_output=True,
                     text=True, timeout=timeout + 10)


def bulk_mbit(hosts, megabytes):
    receiver = start_server(hosts, 1, BULK_RECEIVER)
    hosts.run(0, PY + [textwrap.dedent(BULK_SENDER), hosts.addresses[1], str(megabytes)], check=True, timeout=60)
    return float(receiver.communicate(timeout=60)[0])


def ssh(hosts, name, command):
    return subprocess.run(hosts.ssh_command + [name, command], capture_output=True, text=True, timeout=30)


def leftovers(tag, pids=()):
    """What of instance `tag` is still on this machine (namespaces, links, processes, files)."""
    found = [ns for ns in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
             if tag in ns]
    found += [line.split(":")[1].strip() for line in subprocess.run(["ip", "-o", "link"], capture_output=True,
                                                                     text=True).stdout.splitlines() if tag in line]
    found += [line for line in subprocess.run(["ps", "-eo", "pid,stat,args"], capture_output=True, text=True)
              .stdout.splitlines() if f"/{tag}/" in line]
    found += [f"pid {pid}" for pid in pids if running(pid)]
    found += [path for path in [f"/run/tfring-emulated-hosts/{tag}"] if os.path.exists(path)]
    return found


def running(pid):
    """Whether `pid` runs (a zombie waiting for init to reap it does not count)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def tag_of(hosts):
    return os.path.basename(os.path.dirname(hosts.ssh_config))


@pytest.mark.multiprocess
@pytest.mark.emulated_hosts
def test_three_hosts_reach_each_other_and_the_root_namespace_over_tcp():
    started = time.monotonic()
    with hosts_or_skip(3) as hosts:
        assert time.monotonic() - started < 5
        assert hosts.names == ["h0", "h1", "h2"]
        assert len(set(hosts.addresses)) == 3 and hosts.gateway.endswith(".254")
        assert all(a.rsplit(".", 1)[0] == hosts.gateway.rsplit(".", 1)[0] for a in hosts.addresses)
        assert all(len(name) <= 15 for name in hosts.namespaces)
        for i in range(3):
            start_server(hosts, i, ECHO_SERVER)
        for i in range(3):  # each host reaches the next one
            result = echo(hosts, i, hosts.addresses[(i + 1) % 3])
            assert result.stdout.strip() == "ping", result
        for address in hosts.addresses:  # the launcher's namespace reaches every host
            with socket.create_connection((address, 5000), timeout=5) as c:
                c.sendall(b"root")
                assert c.recv(64) == b"root"


@pytest.mark.multiprocess
@pytest.mark.emulated_hosts
def test_ssh_reaches_each_host_in_its_own_namespace_with_its_own_hostname():
    with hosts_or_skip(2) as hosts:
        seen = [ssh(hosts, name, "hostname; readlink /proc/self/ns/net") for name in hosts.names]
        assert [r.returncode for r in seen] == [0, 0], seen
        assert [r.stdout.split()[0] for r in seen] == ["h0", "h1"]
        namespaces = {r.stdout.split()[1] for r in seen} | {os.readlink("/proc/self/ns/net")}
        assert len(namespaces) == 3
        by_address = subprocess.run(hosts.ssh_command + [hosts.addresses[1], "hostname"], capture_output=True,
                                    text=True, timeout=30)
        assert by_address.stdout.strip() == "h1"
        assert hosts.run(0, ["hostname"], capture_output=True, text=True).stdout.strip() == "h0"


@pytest.mark.multiprocess
@pytest.mark.emulated_hosts
def test_shaping_limits_a_bulk_transfer_and_unshape_lifts_it():
    with hosts_or_skip(2, rate_mbit=50) as hosts:
        assert hosts.rate_mbit == 50
        shaped = bulk_mbit(hosts, 5)  # 0.8 s at 50 Mbit/s
        assert 25 < shaped < 75, f"shaped to 50 Mbit/s, measured {shaped:.1f}"
        hosts.unshape()
        assert hosts.rate_mbit is None
        unshaped = bulk_mbit(hosts, 20)
        assert unshaped > 150, f"unshaped, measured only {unshaped:.1f} Mbit/s"
        hosts.shape(20, host=1)
        one_slow_link = bulk_mbit(hosts, 2)
        assert 10 < one_slow_link < 30, f"h1 shaped to 20 Mbit/s, measured {one_slow_link:.1f}"


@pytest.mark.multiprocess
@pytest.mark.emulated_hosts
def test_link_down_cuts_a_host_off_and_link_up_reconnects_it():
    with hosts_or_skip(2) as hosts:
        start_server(hosts, 1, ECHO_SERVER)
        assert echo(hosts, 0, hosts.addresses[1]).returncode == 0
        hosts.link_down(1)
        cut = echo(hosts, 0, hosts.addresses[1], timeout=1.0)
        assert cut.returncode == 1 and "failed" in cut.stdout, cut
        hosts.link_up(1)
        deadline = time.monotonic() + 5  # the bridge port forwards again once the carrier is back
        while (result := echo(hosts, 0, hosts.addresses[1], timeout=1.0)).returncode != 0:
            assert time.monotonic() < deadline, result
        assert result.stdout.strip() == "ping"


@pytest.mark.multiprocess
@pytest.mark.emulated_hosts
def test_stop_sshd_makes_a_host_unreachable_over_ssh():
    with hosts_or_skip(2) as hosts:
        assert ssh(hosts, "h1", "true").returncode == 0
        hosts.stop_sshd(1)
        refused = ssh(hosts, "h1", "true")
        assert refused.returncode == 255, refused
        assert ssh(hosts, "h0", "true").returncode == 0
        hosts.start_sshd(1)
        assert ssh(hosts, "h1", "true").returncode == 0


class Interrupted(Exception):
    pass


@pytest.mark.multiprocess
@pytest.mark.emulated_hosts
@pytest.mark.parametrize("ending", [None, Interrupted, KeyboardInterrupt])
def test_nothing_is_left_behind_however_the_block_ends(ending):
    hosts = hosts_or_skip(2)
    with pytest.raises(ending) if ending else contextlib.nullcontext():
        with hosts:
            tag = tag_of(hosts)
            sleeper = hosts.popen(0, ["sleep", "300"])
            detached = ssh(hosts, "h1", "setsid sleep 300 >/dev/null 2>&1 < /dev/null & echo $!")
            left = [sleeper.pid, int(detached.stdout)]
            assert hosts.pids(0) == [sleeper.pid]
            assert len(hosts.pids(0, include_sshd=True)) == 2
            assert left[1] in hosts.pids(1)
            assert leftovers(tag, left)  # the check sees them while they exist
            if ending:
                raise ending()
    deadline = time.monotonic() + 5  # a process reparented to init is reaped by it, soon
    while leftovers(tag, left) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert leftovers(tag, left) == []
    assert sleeper.poll() == -signal.SIGKILL


@pytest.mark.multiprocess
@pytest.mark.emulated_hosts
def test_a_failed_setup_leaves_nothing_behind(monkeypatch):
    monkeypatch.setattr(sshd, "server_argv", lambda directory, name, address: ["/bin/false"])
    hosts = hosts_or_skip(2, timeout=5)
    with pytest.raises(RuntimeError, match="the sshd of h0 exited with 1"):
        hosts.__enter__()
    assert leftovers(tag_of(hosts)) == []


OWNER_THAT_EXITS = """
import json, subprocess, sys
sys.path.insert(0, sys.argv[1])  # the repository root: tfring_dev is not installed
from tfring_dev.emulated_hosts import EmulatedHosts  # loads no TensorFlow
hosts = EmulatedHosts(2).__enter__()
sleeper = hosts.popen(0, ["sleep", "300"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(json.dumps({"config": hosts.ssh_config, "sleeper": sleeper.pid}), flush=True)
sys.exit(3)  # the `with` is never left: atexit tears down
"""


@pytest.mark.multiprocess
@pytest.mark.emulated_hosts
def test_hosts_never_closed_are_removed_at_interpreter_exit():
    hosts_or_skip(1)  # skips here when they cannot be built
    root = os.path.dirname(os.path.dirname(os.path.dirname(emulated_hosts.__file__)))
    owner = subprocess.run([sys.executable, "-c", OWNER_THAT_EXITS, root], stdout=subprocess.PIPE,
                           text=True, timeout=60)
    assert owner.returncode == 3
    left = json.loads(owner.stdout)
    assert leftovers(os.path.basename(os.path.dirname(left["config"])), [left["sleeper"]]) == []


OWNER_THAT_DIES = """
import json, os, signal, subprocess, sys
sys.path.insert(0, sys.argv[1])  # the repository root: tfring_dev is not installed
from tfring_dev.emulated_hosts import EmulatedHosts  # loads no TensorFlow
hosts = EmulatedHosts(2).__enter__()
sleeper = hosts.popen(0, ["sleep", "300"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(json.dumps({"config": hosts.ssh_config, "sleeper": sleeper.pid}), flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # no teardown, no atexit
"""


@pytest.mark.multiprocess
@pytest.mark.emulated_hosts
def test_cleanup_stale_removes_an_instance_whose_owner_died_and_keeps_live_ones():
    root = os.path.dirname(os.path.dirname(os.path.dirname(emulated_hosts.__file__)))
    with hosts_or_skip(1) as live:
        owner = subprocess.run([sys.executable, "-c", OWNER_THAT_DIES, root], stdout=subprocess.PIPE,
                               text=True, timeout=60)
        assert owner.returncode == -signal.SIGKILL
        dead = json.loads(owner.stdout)
        dead_tag = os.path.basename(os.path.dirname(dead["config"]))
        assert leftovers(dead_tag, [dead["sleeper"]])  # the dead owner's hosts still stand
        assert ssh(live, "h0", "true").returncode == 0  # the child's own cleanup spared us
        removed = emulated_hosts.cleanup_stale()
        assert tag_of(live) not in removed
        # Gone: removed by this call, unless another process's new instance came first.
        assert leftovers(dead_tag, [dead["sleeper"]]) == []
        assert ssh(live, "h0", "true").returncode == 0


def test_unavailable_without_root_says_so(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    ok, reason = emulated_hosts.available()
    assert not ok and "need root" in reason and "uid 1000" in reason
    with pytest.raises(emulated_hosts.EmulatedHostsUnavailable, match="need root"):
        EmulatedHosts(2).__enter__()


def test_unavailable_without_a_tool_names_its_package(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(emulated_hosts.system.shutil, "which", lambda tool: None if tool == "tc" else "/bin/" + tool)
    ok, reason = emulated_hosts.available()
    assert not ok and "`tc` (iproute2)" in reason and "apt-get install" in reason


@pytest.mark.parametrize("args, message", [
    ((0,), "num_hosts must be an int from 1 to 250, got 0"),
    ((2,), None),
    ((2, -5), "rate_mbit must be a positive number of Mbit/s, got -5"),
    ((2, None, 0), "timeout must be a positive number of seconds, got 0"),
])
def test_arguments_are_checked(args, message):
    if message is None:
        assert EmulatedHosts(*args).names == ["h0", "h1"]
    else:
        with pytest.raises(ValueError, match=message):
            EmulatedHosts(*args)
