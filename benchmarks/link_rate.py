"""A link's rate between two emulated hosts: a Python TCP bulk transfer, one way or both at once.

    python benchmarks/link_rate.py sink PORT               # inside the receiving host
    python benchmarks/link_rate.py source ADDRESS:PORT SECONDS   # inside the sending host

`measure_link(hosts)` runs both ends inside `tfring_dev.emulated_hosts` hosts h0 and h1 and returns
Gbit/s (10^9 bit/s). The receiver times from its first byte to the end of the stream, so the
connection's start is left out and the sender's queue drained at the end is counted. Python's
`sendall`/`recv_into` on 4 MiB / 1 MiB buffers copy no more than a C program would, so where the
link is not shaped the figure is what one TCP stream through a veth costs this machine's CPU.
"""

import os
import socket
import subprocess
import sys
import time

HERE = os.path.abspath(__file__)
PORT = 5201  # each host has its own port space


def sink(port):
    """Accepts one connection on `port`, reads it to the end, prints `PROBE <bytes> <seconds>`."""
    with socket.create_server(("", port)) as server:
        server.settimeout(30)
        conn, _ = server.accept()
    buffer, total, first = bytearray(1 << 20), 0, None
    with conn:
        conn.settimeout(60)
        while True:
            n = conn.recv_into(buffer)
            if not n:
                break
            first = first or time.perf_counter()
            total += n
    print(f"PROBE {total} {time.perf_counter() - first if first else 0.0:.6f}", flush=True)


def source(address, port, seconds):
    """Connects to a `sink` at `address:port` (retrying for 10 s) and sends for `seconds`."""
    deadline = time.monotonic() + 10
    while True:
        try:
            sock = socket.create_connection((address, port), timeout=30)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    payload = memoryview(bytearray(4 << 20))
    end = time.perf_counter() + seconds
    with sock:
        while time.perf_counter() < end:
            sock.sendall(payload)


def link_rate(hosts, directions, seconds):
    """Gbit/s between hosts, with every direction in `directions` sending at once.

    Args:
        hosts: an entered `EmulatedHosts`.
        directions: `(from, to)` host indices, e.g. `[(0, 1)]` or `[(0, 1), (1, 0)]`.
        seconds: how long each source sends.

    Returns:
        The slowest direction's rate in Gbit/s, or None if a transfer failed or timed out.

    Example:

    >>> link_rate(hosts, [(0, 1)], 1.0)
    0.957
    """
    me = [sys.executable, HERE]
    sinks = [hosts.popen(dst, me + ["sink", str(PORT)], stdout=subprocess.PIPE, text=True) for _, dst in directions]
    sources = [hosts.popen(src, me + ["source", f"{hosts.addresses[dst]}:{PORT}", str(seconds)])
               for src, dst in directions]
    try:
        for process in sources:
            process.wait(timeout=seconds + 30)
        rates = [_rate(process.communicate(timeout=60)[0]) for process in sinks]
    except subprocess.TimeoutExpired:
        return None
    finally:
        for process in sinks + sources:
            process.kill()
            process.wait()
    return None if None in rates else min(rates)


def measure_link(hosts, seconds=2.0):
    """`{"one_way": Gbit/s h0 to h1, "both_ways": Gbit/s per direction with both busy at once}`.

    A ring allreduce sends both ways at once, so "both_ways" is the rate it can hope for.
    """
    return {"one_way": link_rate(hosts, [(0, 1)], seconds),
            "both_ways": link_rate(hosts, [(0, 1), (1, 0)], seconds)}


def _rate(out):
    fields = out.split()
    if len(fields) != 3 or not float(fields[2]) > 0:
        return None
    return int(fields[1]) * 8 / float(fields[2]) / 1e9


if __name__ == "__main__":
    role, *rest = sys.argv[1:]
    if role == "sink":
        sink(int(rest[0]))
    else:
        address, port = rest[0].rsplit(":", 1)
        source(address, int(port), float(rest[1]))
