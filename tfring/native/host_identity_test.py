"""The host identity the core detects (`library.host_identity`): hostname, boot id and network
namespace, so that network namespaces on one machine count as different hosts."""

import os
import shutil
import socket
import subprocess
import sys

import pytest

from tfring.native import library as _library


def test_the_identity_is_hostname_boot_id_and_network_namespace():
    with open("/proc/sys/kernel/random/boot_id") as f:
        boot_id = f.read().strip()
    assert _library.host_identity() == f"{socket.gethostname()}/{boot_id}/{os.readlink('/proc/self/ns/net')}"


def _netns_unavailable():
    if os.geteuid() != 0:
        return "creating a network namespace needs root"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    return None


@pytest.mark.multiprocess
def test_another_network_namespace_is_another_host():
    reason = _netns_unavailable()
    if reason:
        pytest.skip(reason)
    outside = _library.host_identity()  # builds the library first if needed: the child only loads it
    name = f"tfring-test-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"`ip netns add` failed: {made.stderr.strip()}")
    try:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(_library.__file__))))
        code = "from tfring.native import library; print(library.host_identity())"
        env = dict(os.environ, PYTHONPATH=root, TF_CPP_MIN_LOG_LEVEL="3")
        proc = subprocess.run(["ip", "netns", "exec", name, sys.executable, "-c", code], capture_output=True,
                              text=True, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        inside = proc.stdout.strip().splitlines()[-1]
        assert inside != outside
        # Same machine, same boot: only the namespace differs.
        assert inside.rsplit("/", 1)[0] == outside.rsplit("/", 1)[0]
        assert inside.rsplit("/", 1)[1].startswith("net:[")
    finally:
        subprocess.run(["ip", "netns", "delete", name], capture_output=True)
