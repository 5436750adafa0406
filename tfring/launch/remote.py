"""The far end of `tfring run -H`: started over ssh on another host, it starts one rank there and
stays beside it as the launcher's hand.

The conversation runs over the ssh channel, so nothing secret is ever on a command line (which
`ps` shows to every user of the host):

1. the launcher writes one JSON line: {"interface": IF or null, "want_port": bool};
2. this side answers on stdout with `READY_MARK` and JSON: what it runs (`versions.this_host()`),
   the address it advertises, the launcher's address as seen from here, and (for rank 0, or any
   rank of an elastic job) two free ports for the rendezvous store;
3. the launcher writes the rank's environment (the job secret among it) and command;
4. the rank starts with this process's stdout and stderr (the ssh channel); each later line
   "signal N" is passed to the rank's process group, "notify" to the rank's launcher pipe
   (`LocalRank.notify`: the job may grow), "membership HEX" too (the rank's place in the job's
   next membership, `launch.membership`); EOF (the launcher stopped, or its connection
   died) kills the rank at once. This process exits with the rank's exit code.
"""

import json
import os
import signal
import socket
import sys
import threading

from tfring.launch import addresses
from tfring.launch import cluster
from tfring.launch import core_binding
from tfring.launch import hosts
from tfring.launch import local_rank
from tfring.launch import versions

READY_MARK = "TFRING-REMOTE-READY "
# Seconds the launcher has to send the rank's environment: a far end whose launcher vanished
# behind a cut network must not wait forever (SIGALRM's default action ends it).
CONVERSATION_SECONDS = 300


def _fail(message):
    sys.stderr.write(f"tfring run: {socket.gethostname()}: {message}\n")
    sys.stderr.flush()
    sys.exit(2)


def _read_json_line(what):
    line = sys.stdin.readline()
    if not line:
        sys.exit(1)  # the launcher went away before the rank was started
    try:
        return json.loads(line)
    except ValueError:
        _fail(f"expected {what} from the launcher, got {line[:80]!r}")


def _advertised_address(interface):
    if interface:
        return addresses.interface_address(interface)
    _, here = addresses.ssh_addresses(os.environ)
    return here or addresses.route_source(socket.gethostname()) or socket.gethostname()


def answer(request):
    """Step 2: what this host runs and where it can be reached.

    Args:
        request: the launcher's first line, decoded.

    Returns:
        The answer as a dict (JSON-serialisable).
    """
    address = _advertised_address(request.get("interface"))
    launcher_address, _ = addresses.ssh_addresses(os.environ)
    return {"versions": versions.this_host(), "address": address, "launcher_address": launcher_address,
            # Two: a rank that goes on in place as rank 0 of a new membership serves its store on
            # the one its last store (if it served one) is not on.
            "ports": addresses.free_ports(address, 2) if request.get("want_port") else None}


def _obey(rank, told):
    """Step 4: pass "signal N" and "notify" lines on to the rank; kill it when the launcher's channel closes.

    `told` is set once the launcher has signalled or stopped the rank.
    """
    for line in sys.stdin:
        words = line.split()
        if len(words) == 2 and words[0] == "signal" and words[1].isdigit():
            told.set()
            rank.signal(int(words[1]))
        elif words == ["notify"]:
            rank.notify()
        elif len(words) == 2 and words[0] == "membership":
            rank.tell(bytes.fromhex(words[1]))
    told.set()
    rank.kill()


def _stop_rank_on(rank, signums):
    """Ends the rank's whole process group when this process is told to end (SIGHUP, SIGTERM)."""
    def stop(signum, _frame):
        rank.kill()
        os._exit(128 + signum)
    for signum in signums:
        signal.signal(signum, stop)


def main():
    """Runs steps 1-4 and exits with the rank's exit code."""
    signal.alarm(CONVERSATION_SECONDS)
    request = _read_json_line("the start request")
    try:
        reply = answer(request)
    except (ValueError, OSError) as e:
        _fail(str(e))
    sys.stdout.write(READY_MARK + json.dumps(reply) + "\n")
    sys.stdout.flush()
    job = _read_json_line("the rank's environment")
    signal.alarm(0)
    env = {**os.environ, **job["env"]}
    env.setdefault(cluster.ADVERTISE_HOST, reply["address"])
    slot = hosts.Slot(**job["slot"])
    try:
        cores = core_binding.plan(job["bind_to"], slot.local_rank, slot.local_size)
    except ValueError as e:
        _fail(str(e))
    try:
        rank = local_rank.LocalRank(slot, job["command"], env, None, None, cores)
    except OSError as e:
        _fail(f"cannot start {job['command'][0]!r}: {e.strerror or e}")
    told = threading.Event()
    threading.Thread(target=_obey, args=(rank, told), daemon=True).start()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher decides; its "signal" lines carry it
    _stop_rank_on(rank, (signal.SIGHUP, signal.SIGTERM))
    code = rank.wait()
    rank.kill()  # what the rank left running in its group must not hold the ssh channel open
    if rank.proc.returncode < 0 and not told.is_set():  # the launcher only sees 128+N: say which signal
        sys.stderr.write(f"tfring run: {socket.gethostname()}: {rank.describe_failure(code)}\n")
    sys.exit(code)


if __name__ == "__main__":
    main()
