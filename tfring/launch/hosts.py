"""Where the ranks of a job run: host lists (`-H`, `--hostfile`) and the placement of ranks on them.

Ranks are placed host by host in the order given, filling each host's slots before the next
(rank order = host order, contiguous per host, as horovodrun and `mpirun --map-by slot` do), so a
ring over the ranks crosses the network only where it moves from one host to the next.
"""

import dataclasses
import functools
import re
import socket

from tfring.launch import addresses


@dataclasses.dataclass(frozen=True)
class Host:
    """A host of the job and how many ranks it may run.

    Args:
        name: a name or address `ssh` understands (an alias of ~/.ssh/config counts).
        slots: how many ranks it may run.
    """

    name: str
    slots: int


@dataclasses.dataclass
class Slot:
    """One process of the job: where it runs and what it is."""

    host: str
    rank: int
    local_rank: int
    local_size: int


_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]*$")  # no leading "-": ssh would read an option


def make_host(name, slots_text, where):
    """A `Host` from text; ValueError names `where` (an option, a file and line, a variable)."""
    if not name or not _NAME.match(name):
        raise ValueError(f"{where}: {name!r} is not a host name")
    try:
        slots = int(slots_text)
    except ValueError:
        raise ValueError(f"{where}: the slots of {name!r} must be a whole number, got {slots_text!r}") from None
    if slots < 1:
        raise ValueError(f"{where}: host {name!r} has {slots} slots; give it at least 1")
    return Host(name, slots)


def parse_host_list(text):
    """Reads `-H host1:slots,host2:slots,...` (a host without `:slots` has one slot).

    Args:
        text: the option's value.

    Returns:
        A list of `Host`, in order.

    Raises:
        ValueError: an empty entry, a bad slot count or a host named twice (the message names it).

    Example:

    >>> parse_host_list("node1:4,node2")
    [Host(name='node1', slots=4), Host(name='node2', slots=1)]
    """
    hosts = []
    for entry in text.split(","):
        name, _, slots = entry.strip().partition(":")
        hosts.append(make_host(name, slots or "1", "-H"))
    return no_duplicates(hosts, "-H")


def read_hostfile(path):
    """Reads a hostfile as OpenMPI and Horovod write it: `host slots=N` or `host:N` per line, `#` comments.

    A host named alone on several lines has one slot per line (PBS's `$PBS_NODEFILE` lists each
    host once per slot, as OpenMPI reads it).

    Args:
        path: the file.

    Returns:
        A list of `Host`, in file order.

    Raises:
        ValueError: an unreadable file, a line that is neither form, a bad slot count, a host given
            slots and named again, or no host at all (the message names the file and line).

    Example:

    >>> read_hostfile("hosts.txt")   # "node1 slots=4\\nnode2:2  # the second node"
    [Host(name='node1', slots=4), Host(name='node2', slots=2)]
    """
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise ValueError(f"--hostfile: cannot read {path!r}: {e.strerror}") from None
    hosts, bare = [], []
    for number, line in enumerate(lines, 1):
        words = line.split("#", 1)[0].split()
        if words:
            hosts.append(_hostfile_entry(words, f"{path}:{number}"))
            bare.append(len(words) == 1 and ":" not in words[0])
    if not hosts:
        raise ValueError(f"--hostfile {path!r} names no host")
    return no_duplicates(_add_up_bare_repeats(hosts, bare), path)


def _add_up_bare_repeats(hosts, bare):
    """Merges the lines of a host named alone on each (one slot per line) into one `Host`; a host
    given slots stays as it is (named again, `_no_duplicates` refuses it)."""
    with_slots = {h.name for h, b in zip(hosts, bare) if not b}
    result, index = [], {}
    for host, is_bare in zip(hosts, bare):
        if is_bare and host.name not in with_slots and host.name in index:
            k = index[host.name]
            result[k] = Host(host.name, result[k].slots + 1)
        else:
            index.setdefault(host.name, len(result))
            result.append(host)
    return result


def _hostfile_entry(words, where):
    name, slots = words[0], "1"
    if ":" in name and len(words) == 1:
        name, slots = name.rsplit(":", 1)
    for word in words[1:]:
        key, _, value = word.partition("=")
        if key in ("slots", "max_slots", "max-slots") and value:
            slots = value if key == "slots" else slots
        else:
            raise ValueError(f"{where}: expected 'host slots=N' or 'host:N', got {' '.join(words)!r}")
    return make_host(name, slots, where)


def no_duplicates(hosts, where):
    """`hosts` when no name repeats; ValueError names the repeated host and `where`."""
    seen = set()
    for host in hosts:
        if host.name in seen:
            raise ValueError(f"{where}: host {host.name!r} is listed twice; give it once with all its slots")
        seen.add(host.name)
    return hosts


def plan_slots(num_processes, hosts=None):
    """Assigns ranks to hosts in order, filling each host's slots.

    Args:
        num_processes: the job size; None means every slot of `hosts`.
        hosts: a list of `Host`; None means all on this host.

    Returns:
        A list of `Slot`, one per rank.

    Raises:
        ValueError: fewer than one process, or more than the hosts have slots for.

    Example:

    >>> [s.host for s in plan_slots(3, [Host("a", 2), Host("b", 2)])]
    ['a', 'a', 'b']
    """
    if num_processes is None:
        num_processes = sum(h.slots for h in hosts or [])
    if num_processes < 1:
        raise ValueError(f"-np must be at least 1, got {num_processes}")
    hosts = hosts or [Host("localhost", num_processes)]
    total = sum(h.slots for h in hosts)
    if total < num_processes:
        listed = ", ".join(f"{h.name}:{h.slots}" for h in hosts)
        raise ValueError(f"-np {num_processes} does not fit the {total} slots of the hosts given ({listed})")
    slots, rank = [], 0
    for host in hosts:
        here = min(host.slots, num_processes - rank)
        slots.extend(Slot(host.name, rank + i, i, here) for i in range(here))
        rank += here
        if rank == num_processes:
            break
    return slots


@functools.lru_cache(maxsize=None)
def _own_names():
    return {socket.gethostname(), socket.getfqdn()}  # getfqdn asks DNS: once per launcher


@functools.lru_cache(maxsize=None)
def is_local(name):
    """Whether `name` is this host: `localhost`, this host's name, or an address of one of its interfaces.

    A name that does not resolve (an ssh alias, say) is taken to be another host.

    Args:
        name: a host name or address.

    Returns:
        True for this host.
    """
    if name == "localhost" or name in _own_names():
        return True
    try:
        infos = socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return False
    return any(addresses.is_own_ipv4(info[4][0]) for info in infos)


