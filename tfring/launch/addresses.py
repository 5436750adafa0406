"""Which address of a host the other hosts should use: an interface's, or the one ssh came in on.

Rank 0's rendezvous store and every rank's ring listener advertise one address to the other hosts.
A host with several interfaces (a management network, a fast data network, docker bridges) must
advertise the one the other hosts can reach: `--interface IF` names it; by default it is the
address the launcher's ssh connection reached the host at (`SSH_CONNECTION`), which is the
interface that routes to the launcher, and on the launcher's own host the address ssh came from.
"""

import fcntl
import ipaddress
import socket
import struct

_SIOCGIFADDR = 0x8915


def interface_address(name):
    """The IPv4 address of the interface `name` on this host.

    Args:
        name: an interface name such as "eth0" or "ib0".

    Returns:
        The address as text.

    Raises:
        ValueError: there is no such interface, or it has no IPv4 address (the message lists the
            interfaces there are).

    Example:

    >>> interface_address("lo")
    '127.0.0.1'
    """
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        except OSError:
            known = ", ".join(n for _, n in socket.if_nameindex())
            raise ValueError(f"{socket.gethostname()} has no interface {name!r} with an IPv4 address "
                             f"(its interfaces: {known})") from None
    return socket.inet_ntoa(packed[20:24])


def _ipv4(text):
    """`text` when it is an IPv4 address (also written as IPv6-mapped), else None: the core is IPv4 only."""
    try:
        address = ipaddress.ip_address(text or "")
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address):
        address = address.ipv4_mapped
    return str(address) if address else None


def is_own_ipv4(address):
    """Whether `address` is an IPv4 address of one of this host's interfaces (it can be bound).

    Args:
        address: text, or None.

    Returns:
        bool.
    """
    if _ipv4(address) is None:
        return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((_ipv4(address), 0))
            return True
        except OSError:
            return False


def ssh_addresses(environ):
    """Both ends of the ssh connection this process was started through.

    Args:
        environ: the environment sshd gave the remote command.

    Returns:
        (launcher's address, this host's address) as IPv4 text, each None outside ssh or when
        ssh ran over IPv6.
    """
    words = environ.get("SSH_CONNECTION", "").split()
    if len(words) != 4:
        return None, None
    return _ipv4(words[0]), _ipv4(words[2])


def route_source(destination):
    """The address this host sends from when it talks to `destination` (the interface routing there).

    Args:
        destination: an IPv4 address or a name that resolves to one.

    Returns:
        The local address as text, or None when `destination` does not resolve or is unreachable.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect((destination, 9))  # a UDP "connect" sends nothing: it only picks the route
            return s.getsockname()[0]
        except OSError:
            return None


def free_ports(host, count):
    """`count` different TCP ports on `host` that were free a moment ago.

    Args:
        host: the local address to bind.
        count: how many.

    Returns:
        A list of ints.
    """
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def free_port(host="127.0.0.1"):
    """A TCP port on `host` that was free a moment ago (for the store, tests and benchmarks).

    Args:
        host: the local address to bind.

    Returns:
        An int.
    """
    return free_ports(host, 1)[0]


def default_address():
    """The address this host advertises when nothing names one: the source of its default route,
    else its first non-loopback IPv4 address, else loopback.

    Returns:
        An IPv4 address as text.
    """
    routed = route_source("192.0.2.1")  # TEST-NET-1: only the routing table is consulted
    if routed and not routed.startswith("127."):
        return routed
    for _, name in socket.if_nameindex():
        try:
            address = interface_address(name)
        except ValueError:
            continue
        if not address.startswith("127."):
            return address
    return "127.0.0.1"
