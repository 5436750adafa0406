"""EmulatedHosts: several hosts on this machine, each a network namespace with an sshd."""

import atexit
import os
import subprocess
import time
import warnings

from tfring_dev.emulated_hosts import instances
from tfring_dev.emulated_hosts import sshd
from tfring_dev.emulated_hosts import system

_INNER_LINK = "eth0"  # the host's end of its veth, inside its namespace


class EmulatedHosts:
    """`num_hosts` hosts on this machine, each reachable over ssh at its own address.

    Built on entering the context (in well under a second for a few hosts) and removed on leaving
    it, also on an exception, KeyboardInterrupt or interpreter exit (atexit): every process in
    every namespace is killed, then the namespaces, veths, bridge and files go.

    Args:
        num_hosts: how many hosts, 1 to 250.
        rate_mbit: if not None, each host's link is shaped to this many Mbit/s (10^6 bit/s) in each
            direction from the start; see `shape`.
        timeout: seconds to wait for every sshd to answer on entry.

    Raises:
        EmulatedHostsUnavailable: on entry, when this machine cannot build them (not root, a tool
            missing, namespaces or veths refused); the message says what is missing.

    Example:

    >>> with EmulatedHosts(2, rate_mbit=100) as hosts:
    ...     subprocess.run(hosts.ssh_command + ["h1", "hostname"], capture_output=True).stdout
    b'h1\\n'
    """

    def __init__(self, num_hosts, rate_mbit=None, timeout=10.0):
        if isinstance(num_hosts, bool) or not isinstance(num_hosts, int) or not 1 <= num_hosts <= 250:
            raise ValueError(f"EmulatedHosts: num_hosts must be an int from 1 to 250, got {num_hosts!r}")
        self._rate_mbit = None if rate_mbit is None else _check_rate(rate_mbit)
        if not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ValueError(f"EmulatedHosts: timeout must be a positive number of seconds, got {timeout!r}")
        self._timeout = float(timeout)
        self._tag = instances.new_tag()
        self._dir = instances.state_dir(self._tag)
        self._names = [f"h{i}" for i in range(num_hosts)]
        own = instances.PREFIX + self._tag
        self._namespaces = [f"{own}h{i}" for i in range(num_hosts)]
        self._veths = [f"{own}v{i}" for i in range(num_hosts)]  # the root ends
        self._bridge = f"{own}br"
        self._network = None  # the private /24, chosen on entry
        self._sshds = [None] * num_hosts
        self._children = []  # every Popen we made, reaped at teardown so none is left a zombie
        self._state = "new"  # new -> open -> closed
        self._owner = None  # the pid that entered: only it tears down at exit

    @property
    def names(self):
        """The hosts' ssh aliases in `ssh_config`, also their hostnames: `["h0", "h1", ...]`."""
        return list(self._names)

    @property
    def addresses(self):
        """The hosts' IPv4 addresses, `10.X.Y.1` onwards, as strings."""
        return [str(self._subnet()[i + 1]) for i in range(len(self._names))]

    @property
    def namespaces(self):
        """The hosts' network namespace names (`ip netns list`)."""
        return list(self._namespaces)

    @property
    def gateway(self):
        """`10.X.Y.254`: the root namespace's address on the bridge, which every host reaches."""
        return str(self._subnet()[254])

    @property
    def ssh_config(self):
        """The path of the ssh client config that defines the aliases `h0`, `h1`, ..."""
        return os.path.join(self._dir, "ssh_config")

    @property
    def identity_file(self):
        """The path of the private key every host's sshd accepts for root."""
        return os.path.join(self._dir, "client_key")

    @property
    def ssh_command(self):
        """`["ssh", "-F", ssh_config]`: a prefix for `ssh`, and for `tfring run --rsh`."""
        return ["ssh", "-F", self.ssh_config]

    @property
    def rate_mbit(self):
        """The rate every link was last shaped to with `shape(rate)`, or None when unshaped."""
        return self._rate_mbit

    def __enter__(self):
        if self._state != "new":
            raise RuntimeError("EmulatedHosts: an instance can be entered once; make a new one")
        ok, reason = system.available()
        if not ok:
            raise system.EmulatedHostsUnavailable(reason)
        self._state = "open"
        self._owner = os.getpid()
        atexit.register(self._close_at_exit)  # the last resort when the `with` is never left normally
        try:
            self._build()
        except BaseException:
            self._close_quietly()  # the caller sees the error that stopped the build
            raise
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self._close_quietly()

    def _build(self):
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation directory
        self._network = instances.claim(self._tag)
        keygen = sshd.start_keygen(self._dir, self._tag)  # runs while the network is made
        self._children += keygen
        self._make_network()
        if self._rate_mbit is not None:
            self.shape(self._rate_mbit)
        sshd.finish_keygen(keygen, self._timeout)
        sshd.write_configs(self._dir, self._tag, self._names, self.addresses)
        for i in range(len(self._names)):
            self._sshds[i] = self._spawn_sshd(i)
        deadline = time.monotonic() + self._timeout
        for i in range(len(self._names)):
            self._wait_for_sshd(i, deadline)

    def _make_network(self):
        unavailable = "this kernel or container refuses to make a bridge, veths or network namespaces"
        root = [f"link add {self._bridge} type bridge",
                f"addr add {self.gateway}/24 dev {self._bridge}", f"link set {self._bridge} up"]
        for ns, veth in zip(self._namespaces, self._veths):
            root += [f"netns add {ns}", f"link add {veth} type veth peer name {_INNER_LINK} netns {ns}",
                     f"link set {veth} master {self._bridge} up"]
        system.ip_batch([], root, unavailable)
        for ns, address in zip(self._namespaces, self.addresses):
            # The default route lets a host reach every root-namespace address, not only .254.
            system.ip_batch(["-n", ns], [f"addr add {address}/24 dev {_INNER_LINK}", f"link set {_INNER_LINK} up",
                                         "link set lo up", f"route add default via {self.gateway}"], unavailable)

    def _spawn_sshd(self, i):
        argv = sshd.server_argv(self._dir, self._names[i], self.addresses[i])
        return self.popen(i, argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def _wait_for_sshd(self, i, deadline):
        sshd.wait_for_server(self._sshds[i], self._names[i], self.addresses[i],
                             sshd.log_path(self._dir, self._names[i]), deadline)

    def exec_prefix(self, i):
        """The argv prefix that runs a command in host `i`: its namespace and its own hostname.

        Args:
            i: the host's index.

        Returns:
            A list such as `["ip", "netns", "exec", ns, "unshare", "--uts", ...]`; each program
            execs the next, so a Popen's pid is the command's own.

        Example:

        >>> subprocess.run(hosts.exec_prefix(1) + ["hostname"], capture_output=True).stdout
        b'h1\\n'
        """
        self._check_host(i)
        # Absolute paths: a caller's `env` may have no PATH. The shell names its new UTS namespace
        # after the host, then becomes the command.
        return [system.tool("ip"), "netns", "exec", self._namespaces[i], system.tool("unshare"), "--uts", "--",
                "/bin/sh", "-c", 'hostname "$0" && exec "$@"', self._names[i]]

    def popen(self, i, argv, **kwargs):
        """Starts `argv` inside host `i` (its network namespace and hostname).

        Args:
            i: the host's index.
            argv: the command, a list of strings (no shell).
            **kwargs: passed to `subprocess.Popen`.

        Returns:
            The `subprocess.Popen`; its process is killed at teardown if still running.

        Example:

        >>> server = hosts.popen(1, ["python3", "-m", "http.server", "8000"])
        """
        if isinstance(argv, (str, bytes)) or not argv:
            raise ValueError(f"EmulatedHosts.popen: argv must be a non-empty list of strings, got {argv!r}")
        process = subprocess.Popen(self.exec_prefix(i) + list(argv), **kwargs)
        self._children.append(process)
        return process

    def run(self, i, argv, timeout=60.0, **kwargs):
        """Runs `argv` inside host `i` to completion, as `subprocess.run` does.

        Args:
            i: the host's index.
            argv: the command, a list of strings (no shell).
            timeout: seconds before the command is killed and `subprocess.TimeoutExpired` raised.
            **kwargs: passed to `subprocess.run` (`capture_output=True`, `text=True`, `check=True`...).

        Returns:
            The `subprocess.CompletedProcess`.

        Example:

        >>> hosts.run(0, ["hostname"], capture_output=True, text=True).stdout
        'h0\n'
        """
        if isinstance(argv, (str, bytes)) or not argv:
            raise ValueError(f"EmulatedHosts.run: argv must be a non-empty list of strings, got {argv!r}")
        return subprocess.run(self.exec_prefix(i) + list(argv), timeout=timeout, **kwargs)

    def pids(self, i, include_sshd=False):
        """The processes running inside host `i`.

        Args:
            i: the host's index.
            include_sshd: whether to include the host's sshd and its per-connection processes (named
                `sshd`, `sshd-session`).

        Returns:
            A sorted list of pids.

        Example:

        >>> hosts.pids(0)
        []
        """
        self._check_host(i)
        pids = system.namespace_pids(self._namespaces[i])
        if not include_sshd:
            pids = [pid for pid in pids if not system.process_name(pid).startswith("sshd")]
        return sorted(pids)

    def link_down(self, i):
        """Cuts host `i` off: its veth's root end goes down, so nothing reaches it or leaves it.

        Args:
            i: the host's index.

        Example:

        >>> hosts.link_down(1)  # a connection to hosts.addresses[1] now times out
        """
        self._check_host(i)
        system.run_command(["ip", "link", "set", self._veths[i], "down"])

    def link_up(self, i, seconds=60.0, answer=True):
        """Reconnects host `i` after `link_down(i)`; returns once it answers over ssh (the
        neighbour entries of the cut may say "no route to host" for a few seconds).

        Args:
            i: the host's index.
            seconds: how long it may take to answer.
            answer: False to return at once (a host whose sshd is stopped cannot answer: start it
                after).

        Raises:
            RuntimeError: it did not answer within `seconds`.

        Example:

        >>> hosts.link_up(1)
        """
        self._check_host(i)
        system.run_command(["ip", "link", "set", self._veths[i], "up"])
        if not answer:
            return
        deadline = time.monotonic() + seconds
        while True:
            try:
                if subprocess.run([*self.ssh_command, self._names[i], "true"], capture_output=True,
                                  stdin=subprocess.DEVNULL, timeout=10).returncode == 0:
                    return
            except subprocess.TimeoutExpired:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self._names[i]} does not answer over ssh {seconds:g} s after its link came back")
            time.sleep(0.5)

    def stop_sshd(self, i):
        """Kills host `i`'s sshd, so ssh to it is refused; its other processes keep running.

        Args:
            i: the host's index.

        Example:

        >>> hosts.stop_sshd(1)  # `ssh -F cfg h1 true` now fails
        """
        self._check_host(i)
        server = self._sshds[i]
        if server is not None and server.poll() is None:
            server.kill()
            server.wait(timeout=10)

    def start_sshd(self, i):
        """Starts host `i`'s sshd again after `stop_sshd(i)`; returns once it answers.

        Args:
            i: the host's index.

        Example:

        >>> hosts.start_sshd(1)
        """
        self._check_host(i)
        if self._sshds[i] is None or self._sshds[i].poll() is not None:
            self._sshds[i] = self._spawn_sshd(i)
            self._wait_for_sshd(i, time.monotonic() + self._timeout)

    def shape(self, rate_mbit, host=None):
        """Limits host links to `rate_mbit` Mbit/s each way, with a token bucket (`tc ... tbf`).

        Both ends of the veth get one, so what a host sends and what it receives are each limited;
        a transfer between two shaped hosts runs at the rate of the slower link.

        Args:
            rate_mbit: the rate in Mbit/s (10^6 bit/s), a positive number.
            host: one host's index, or None for every host.

        Raises:
            EmulatedHostsUnavailable: `tc` cannot add a tbf qdisc here (module sch_tbf missing).

        Example:

        >>> hosts.shape(50)  # and hosts.unshape() to lift it
        """
        rate_mbit = _check_rate(rate_mbit)
        for i in self._hosts(host):
            for tc, link in self._link_ends(i):
                system.run_command(tc + ["qdisc", "replace", "dev", link, "root"] + _tbf(rate_mbit),
                                   unavailable="`tc` cannot add a tbf qdisc here (no sch_tbf in this kernel?)")
        if host is None:
            self._rate_mbit = rate_mbit

    def unshape(self, host=None):
        """Lifts the limits `shape` set.

        Args:
            host: one host's index, or None for every host.

        Example:

        >>> hosts.unshape()
        """
        for i in self._hosts(host):
            for tc, link in self._link_ends(i):
                system.run_command(tc + ["qdisc", "del", "dev", link, "root"], check=False)  # fails if unshaped
        if host is None:
            self._rate_mbit = None

    def close(self):
        """Removes everything: kills every process in the hosts, then namespaces, links and files.

        Called on leaving the `with` block; safe to call again.

        Raises:
            RuntimeError: something could not be removed; the message says what.

        Example:

        >>> hosts.close()
        """
        if self._state != "open":
            return
        problems = instances.release(self._tag, self._children)
        self._state = "closed"
        atexit.unregister(self._close_at_exit)
        if problems:
            raise RuntimeError(f"EmulatedHosts {self._tag}: teardown left " + "; ".join(problems))

    def _close_at_exit(self):
        if os.getpid() == self._owner:  # a forked child inherits the handler, not the hosts
            self._close_quietly()

    def _close_quietly(self):
        # Used while another exception propagates: a teardown failure must not hide it.
        try:
            self.close()
        except Exception as e:
            warnings.warn(str(e), RuntimeWarning, stacklevel=3)

    def _subnet(self):
        if self._network is None:
            raise RuntimeError("EmulatedHosts: the addresses are chosen on entering the `with` block")
        return self._network

    def _check_host(self, i):
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(self._names):
            raise ValueError(f"EmulatedHosts: host index must be an int from 0 to {len(self._names) - 1}, got {i!r}")
        if self._state != "open":
            raise RuntimeError(f"EmulatedHosts: the hosts are {self._state}: use them inside the `with` block")

    def _hosts(self, host):
        if host is None:
            self._check_host(0)
            return range(len(self._names))
        self._check_host(host)
        return [host]

    def _link_ends(self, i):
        # Each end's egress: the root end's is what host i receives, the inner end's what it sends.
        return (["tc"], self._veths[i]), (["tc", "-n", self._namespaces[i]], _INNER_LINK)


def _check_rate(rate_mbit):
    if isinstance(rate_mbit, bool) or not isinstance(rate_mbit, (int, float)) or not rate_mbit > 0:
        raise ValueError(f"EmulatedHosts: rate_mbit must be a positive number of Mbit/s, got {rate_mbit!r}")
    return float(rate_mbit)


def _tbf(rate_mbit):
    # The bucket holds 4 ms at the rate, at least 16 KiB (several full frames, else a slow rate
    # could send nothing); the queue holds 50 ms, room for TCP to keep the link busy.
    burst = max(16384, int(rate_mbit * 1e6 / 8 * 0.004))
    return ["tbf", "rate", f"{rate_mbit:g}mbit", "burst", str(burst), "latency", "50ms"]
