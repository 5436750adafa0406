"""The OpenSSH side of emulated hosts: keys, the server and client configs, waiting for a server.

One host key and one client key per instance (ed25519), one sshd_config shared by every host (the
listening address and pid file differ per host, and are given on each sshd's command line), and a
client config whose aliases `h0`, `h1`, ... name the hosts, so `ssh -F <config> h1 ...` just works.
"""

import contextlib
import os
import socket
import subprocess
import time

from tfring_dev.emulated_hosts import system

PORT = 22


def start_keygen(directory, tag):
    """Starts ssh-keygen for the host key and the client key; returns the two processes."""
    return [subprocess.Popen(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"tfring-emulated-hosts-{tag}",
                              "-f", os.path.join(directory, key)],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            for key in ("host_key", "client_key")]


def finish_keygen(processes, timeout):
    """Waits for `start_keygen`'s processes; raises if one fails or takes more than `timeout` s."""
    deadline = time.monotonic() + timeout
    for p in processes:
        try:
            out, _ = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            raise TimeoutError(f"EmulatedHosts: ssh-keygen took more than {timeout:g} s") from None
        if p.returncode != 0:
            raise RuntimeError(f"EmulatedHosts: ssh-keygen failed ({p.returncode}): "
                               f"{out.decode(errors='replace').strip()}")


def write_configs(directory, tag, names, addresses):
    """Writes `sshd_config` and the client's `ssh_config` into `directory`."""
    with open(os.path.join(directory, "sshd_config"), "w") as f:
        f.write(_server_config(directory, tag))
    aliases = "".join(f"Host {name}\n  HostName {address}\n" for name, address in zip(names, addresses))
    client = os.path.join(directory, "ssh_config")
    with open(client, "w") as f:
        f.write(aliases + _client_defaults(os.path.join(directory, "client_key")))
    os.chmod(client, 0o600)  # ssh refuses a config others can write


def server_argv(directory, name, address):
    """The command that runs host `name`'s sshd in the foreground on `address`, logging to a file."""
    return [system.SSHD, "-D", "-f", os.path.join(directory, "sshd_config"), "-E", log_path(directory, name),
            "-o", f"ListenAddress={address}:{PORT}",
            "-o", f"PidFile={os.path.join(directory, f'sshd-{name}.pid')}"]


def log_path(directory, name):
    """Where host `name`'s sshd logs (errors only)."""
    return os.path.join(directory, f"sshd-{name}.log")


def wait_for_server(process, name, address, log, deadline):
    """Returns once the sshd `process` answers on `address` with its banner.

    Listening is not enough: waiting for the banner means the first ssh cannot race sshd's start.
    Raises when the process exits or `deadline` (time.monotonic) passes, quoting its log.
    """
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"EmulatedHosts: the sshd of {name} exited with {process.returncode}; "
                               f"its log says: {_tail(log)}")
        with contextlib.suppress(OSError):
            with socket.create_connection((address, PORT), timeout=0.5) as s:
                if s.recv(8).startswith(b"SSH-"):
                    return
        if time.monotonic() > deadline:
            raise TimeoutError(f"EmulatedHosts: the sshd of {name} did not answer on {address}:{PORT} "
                               f"in time; its log says: {_tail(log)}")
        time.sleep(0.02)


def _tail(path, chars=600):
    try:
        with open(path, errors="replace") as f:
            return f.read()[-chars:].strip() or "(empty)"
    except OSError:
        return "(no log)"


def _server_config(directory, tag):
    # Only what differs from a stock sshd: our keys, root by key, no PAM (a container may have no
    # PAM stack for root), no mode checks (the keys sit in /run), room for a launcher's parallel
    # connections (MaxStartups defaults to 10 unauthenticated at once).
    return (f"# tfring_dev.emulated_hosts instance {tag}: removed with it.\n"
            f"Port {PORT}\n"
            f"HostKey {directory}/host_key\n"
            f"AuthorizedKeysFile {directory}/client_key.pub\n"
            "PermitRootLogin yes\nPubkeyAuthentication yes\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nUseDNS no\n"
            "PrintMotd no\nPrintLastLog no\nMaxStartups 100\nMaxSessions 100\nLogLevel ERROR\n")


def _client_defaults(identity_file):
    # No known-hosts file: every instance has a new host key, and the addresses are reused.
    return ("Host *\n  User root\n"
            f"  IdentityFile {identity_file}\n  IdentitiesOnly yes\n"
            "  UserKnownHostsFile /dev/null\n  GlobalKnownHostsFile /dev/null\n  StrictHostKeyChecking no\n"
            "  LogLevel ERROR\n  BatchMode yes\n  ConnectTimeout 5\n")
