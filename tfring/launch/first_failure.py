"""Which rank a failed job is blamed on: the first to fail by itself, not one that lost its peer.

When a rank dies, its ring neighbours fail too, with the core's errors for a lost peer
(`UnavailableError: ... lost the connection to rank 1`); one of them may even exit before the
rank that caused it (a rank that raised still runs its exit handlers). The launcher therefore
orders the ranks by when their exit was seen, and skips those whose last stderr lines read as a
lost peer (`PEER_LOST`), as long as another rank failed by itself.
"""

import dataclasses
import re

# The core's words when a peer is gone or a collective timed out waiting for one, as they end a
# rank's UnavailableError (tfring/native/cc/core). N stands for a rank number.
# first_failure_test checks that each phrase still occurs in the core's sources.
PEER_LOST = (
    "rank N exited or closed its connection",  # transport/shm_transport.cc
    "rank N exited",  # transport/shm_transport.cc: a single-copy read from a dead process
    "lost the connection to rank N",  # transport/tcp_transport.cc
    "connection closed by peer",  # transport/socket.cc
    "connection lost while sending",  # transport/socket.cc
    "connection lost while receiving",  # transport/socket.cc
    "transport was aborted after an earlier failure",  # transport/ring_transport.cc
    "rank N stopped answering",  # transport/ring_transport.cc: the collective's deadline
    "while data from rank N was still moving",  # transport/ring_transport.cc: the deadline, mid-transfer
    "first failure, reported by another rank",  # engine/engine.cc
    "the rendezvous store on rank 0 is gone",  # engine/engine.cc
    "closed the connection (rank 0 exited",  # rendezvous/tcp_store.cc
    "the rendezvous store of rank 0 at",  # rendezvous/tcp_store.cc: it stopped answering
    "cannot reach the store of rank 0",  # rendezvous/tcp_store.cc
)
# Not "UnavailableError" alone: the core also raises it for causes (/dev/shm full).
_PEER_LOST = re.compile("|".join(re.escape(p).replace("N", r"-?\d+") for p in PEER_LOST))
_LAST_LINE_CHARS = 300


@dataclasses.dataclass
class RankEnd:
    """How one rank of a failed job ended, as the launcher saw it.

    Args:
        rank: the rank.
        code: its exit code (128+N for signal N), or None when it never ended.
        seen_at: `time.monotonic()` when its exit was first seen (`math.inf` when never).
        stopped: True when the launcher had begun to stop the job before it ended.
        tail: its last stderr lines (str, newest last).
    """

    rank: int
    code: int
    seen_at: float
    stopped: bool
    tail: list


def reads_as_consequence(tail):
    """Whether a rank's last stderr lines say it failed because a peer did.

    Args:
        tail: lines (str).

    Returns:
        True when a line holds one of the core's lost-peer phrases (`PEER_LOST`).

    Example:

    >>> reads_as_consequence(["UnavailableError: ... lost the connection to rank 1: connection closed by peer"])
    True
    """
    return any(_PEER_LOST.search(line) for line in tail)


# The core's words when a peer's host went silent (cut off, powered down), rather than its rank
# ending: the ring's keepalive probes or the collective's deadline ran out. N stands for a rank.
SILENT = (
    r"lost the connection to rank (N): [^\n]*(?:timed out|No route to host|Host is unreachable)",
    r"rank (N) stopped answering",  # transport/ring_transport.cc: the collective's deadline
    r"while data from rank (N) was still moving",  # transport/ring_transport.cc
)
_SILENT = [re.compile(p.replace("(N)", r"(-?\d+)")) for p in SILENT]


def silent_named(tail):
    """The rank whose host a failure says went silent (`lost the connection to rank 2: ...
    Connection timed out`, `rank 2 stopped answering`), or None (a closed connection, no rank).

    Args:
        tail: a rank's last stderr lines.

    Returns:
        A rank number, or None.

    Example:

    >>> silent_named(["UnavailableError: ... rank 2 stopped answering"])
    2
    """
    for line in reversed(tail):
        for pattern in _SILENT:
            match = pattern.search(line)
            if match:
                return int(match.group(1))
    return None


def last_line(tail):
    """The last non-empty line of `tail`, stripped and shortened to 300 characters ("" if none)."""
    for line in reversed(tail):
        if line.strip():
            text = line.strip()
            return text if len(text) <= _LAST_LINE_CHARS else text[:_LAST_LINE_CHARS] + "..."
    return ""


def blame(ends):
    """The rank to blame for a failed job, and the ranks that ended because of it.

    The earliest failure (by `seen_at`) whose rank ended by itself and whose stderr does not read
    as a lost peer; failing that (every failure reads as one), the earliest failure.

    Args:
        ends: a `RankEnd` per rank, at least one with a code other than 0.

    Returns:
        (the cause's `RankEnd`, sorted list of the other ranks that failed or were stopped).

    Example:

    >>> cause, others = blame([RankEnd(0, 1, 1.0, False, ["... lost the connection to rank 1"]),
    ...                        RankEnd(1, 1, 1.2, False, ["ValueError: boom"])])
    >>> cause.rank, others
    (1, [0])
    """
    failed = sorted((e for e in ends if e.code != 0), key=lambda e: (e.seen_at, e.rank))
    own = [e for e in failed if not e.stopped and not reads_as_consequence(e.tail)]
    cause = (own or failed)[0]
    return cause, sorted(e.rank for e in ends if e.rank != cause.rank and (e.code != 0 or e.stopped))


def summary(description, tail, others):
    """The launcher's last line about a failed job (without the `tfring run: ` prefix).

    Args:
        description: how the cause ended, e.g. "rank 1 exited with code 1".
        tail: the cause's last stderr lines.
        others: the ranks that ended because of it.

    Returns:
        One line.

    Example:

    >>> summary("rank 1 exited with code 1", ["ValueError: boom"], [0, 2])
    'first failure: rank 1 exited with code 1 (last stderr line: ValueError: boom); stopped ranks 0, 2 because of it'
    """
    line = f"first failure: {description}"
    if last_line(tail):
        line += f" (last stderr line: {last_line(tail)})"
    if others:
        line += f"; stopped rank{'s' if len(others) > 1 else ''} {', '.join(map(str, others))} because of it"
    return line
