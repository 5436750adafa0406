"""Several hosts on one machine, for tfring's multi-host tests and benchmarks.

Each emulated host is a Linux network namespace with its own IPv4 address in a private
10.X.Y.0/24, joined to the others by a veth pair and a bridge in the root namespace (which has
10.X.Y.254, so a launcher there reaches every host), with a real OpenSSH server on port 22: `tfring
run --rsh "ssh -F <config>"` reaches it as it would a real machine. Each host also has its own
hostname ("h0", "h1", ...; a UTS namespace per process started there): tfring tells hosts apart by
hostname and boot id, so without it every emulated host would look like this one machine. `tc`
(a token bucket on both ends of each veth) can limit each host's link, both ways.

    with EmulatedHosts(3, rate_mbit=1000) as hosts:
        subprocess.run(hosts.ssh_command + ["h1", "hostname"])   # prints h1
        hosts.link_down(2)                                        # h2 is cut off

The instance removes everything it made on leaving the `with` block, whatever happens;
`cleanup_stale()`, which every new instance calls first, removes what a killed owner left behind.

Limits: the hosts share everything but the network and the hostname (files, /dev/shm, pids, the
boot id), so only what crosses the network is emulated. `tc` shapes bandwidth only (no netem here
for delay or loss). Where br_netfilter is loaded and iptables' FORWARD chain drops (Docker hosts),
traffic between hosts over the bridge is dropped too. Processes killed at teardown whose parent
died first are reaped by init, which may take a moment.

Modules: hosts.py (EmulatedHosts), sshd.py (keys, configs, waiting for a server), instances.py
(names, the state directory, teardown, stale instances), system.py (what the machine must have,
the processes of a namespace). Needs root, iproute2, util-linux and openssh-server. Standard
library only: no TensorFlow.
"""

from tfring_dev.emulated_hosts.hosts import EmulatedHosts
from tfring_dev.emulated_hosts.instances import cleanup_stale
from tfring_dev.emulated_hosts.system import EmulatedHostsUnavailable
from tfring_dev.emulated_hosts.system import available

__all__ = ["EmulatedHosts", "EmulatedHostsUnavailable", "available", "cleanup_stale"]
