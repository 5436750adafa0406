"""What `tfring run` writes on a rank's launcher pipe (`TFRING_LAUNCHER_FD`), and how a rank reads it.

Two kinds of message travel on the pipe, launcher to rank:
- `variables.GROW_NOTICE` (one byte): the elastic job may grow; ranks that commit stop together at
  their next commit.
- a membership: the job's ranks changed and this rank goes on in its process (`tfring.elastic`).
  `MEMBERSHIP`, the length of the body in 8 hexadecimal digits, then the body: JSON of the
  variables this rank's job identity changes to (rank, size, local rank and size, store address,
  job id, restart count). The job secret stays the one the rank started with.

A rank that can go on in its process says so on stderr as it starts training (`CAN_REFORM`, with
the digest of the random state it took at its start: `can_reform_line`); once
it lost a peer it says so (a line holding `REFORM_WAIT`) and waits at most `TFRING_REFORM_SECONDS`
for a membership; without that variable (a launcher that does not re-form jobs in place) it never
waits. Told that the job may grow, such ranks stop at their next commit and wait the same way when
the launcher also sets `TFRING_GROWS_IN_PLACE` (else they exit, and the job starts again on every
slot).

A rank the launcher starts into a running elastic job (a new slot, at a growth in place) starts
alone: `TFRING_JOINING` holds its place in the membership it joins ("rank size local_rank
local_size"), and it joins that membership once it reaches `tfring.elastic.run`, where it waits
for its membership as the other ranks do (`tfring.runtime.init` and `tfring.elastic.reform`).
`TFRING_RANDOM_STATE` gives it the digest the other ranks said: a rank whose own differs (an
unseeded script) cannot join in its process, and exits with `variables.LEFT_AT_COMMIT` before it
waits; the launcher then starts the job again on every slot.
"""

import json
import re

from tfring.launch import variables

MEMBERSHIP = b"M"
_LENGTH_DIGITS = 8
REFORM_WAIT = "waiting for the job's next ranks in this process (tfring.elastic)"
# What a rank that can go on in place says on stderr as it starts training (the launcher keeps the
# line to itself): only when every rank has said it does the launcher wait for them after a failure.
CAN_REFORM = "tfring-elastic: goes on in place when a peer is lost"
REFORM_SECONDS = "TFRING_REFORM_SECONDS"
GROWS_IN_PLACE = "TFRING_GROWS_IN_PLACE"
JOINING = "TFRING_JOINING"
RANDOM_STATE = "TFRING_RANDOM_STATE"
_RANDOM_STATE_SAID = re.compile(rb"\(random state ([0-9a-f]+)\)")


def can_reform_line(random_state):
    """The line a rank that goes on in place says on stderr (`CAN_REFORM`).

    Args:
        random_state: the digest of the random state it took at its start (an int).

    Returns:
        str, without the newline.

    Example:

    >>> can_reform_line(255)
    'tfring-elastic: goes on in place when a peer is lost (random state ff)'
    """
    return f"{CAN_REFORM} (random state {random_state:x})"


def random_state_said(line):
    """The random state digest (hex str) a `can_reform_line` holds, or None.

    Args:
        line: bytes.
    """
    found = _RANDOM_STATE_SAID.search(line)
    return found.group(1).decode() if found else None


def joining_place(environ):
    """The place in the job a rank joins (`TFRING_JOINING`), or None for a rank started with its job.

    Args:
        environ: the variables to read.

    Returns:
        (rank, size, local_rank, local_size), or None.

    Raises:
        ValueError: the variable is set but is not four numbers with rank < size and
            local_rank < local_size.

    Example:

    >>> joining_place({"TFRING_JOINING": "2 3 0 1"})
    (2, 3, 0, 1)
    """
    text = environ.get(JOINING)
    if not text:
        return None
    try:
        rank, size, local_rank, local_size = (int(word) for word in text.split())
    except ValueError:
        raise ValueError(f"{JOINING}={text!r} is not `rank size local_rank local_size`") from None
    if not (0 <= rank < size and 0 <= local_rank < local_size <= size):
        raise ValueError(f"{JOINING}={text!r} is not a place in a job: rank {rank} of {size}, "
                         f"local rank {local_rank} of {local_size}")
    return rank, size, local_rank, local_size


def encode(env):
    """The bytes of a membership message.

    Args:
        env: a dict of variable names to string values.

    Returns:
        bytes to write on the rank's launcher pipe.

    Example:

    >>> encode({"TFRING_RANK": "1", "TFRING_SIZE": "2"})[:9]
    b'M0000002a'
    """
    body = json.dumps({str(k): str(v) for k, v in env.items()}, sort_keys=True).encode()
    return MEMBERSHIP + b"%0*x" % (_LENGTH_DIGITS, len(body)) + body


class Reader:
    """Splits what a rank reads on its launcher pipe into messages, however the reads cut them.

    Example:

    >>> reader = Reader()
    >>> reader.feed(b"G" + encode({"TFRING_RANK": "0"}))
    [b'G', {'TFRING_RANK': '0'}]
    """

    def __init__(self):
        self._pending = b""

    def feed(self, data):
        """Adds bytes read from the pipe; returns the messages they complete, in order:
        `GROW_NOTICE` (bytes) or a membership (a dict).

        Raises:
            ValueError: bytes that are no message (the pipe is the launcher's alone); what was
                pending is dropped.
        """
        self._pending += data
        found = []
        while self._pending:
            kind = self._pending[:1]
            if kind == variables.GROW_NOTICE:
                found.append(kind)
                self._pending = self._pending[1:]
                continue
            if kind != MEMBERSHIP:
                self._pending = b""  # (what follows cannot be framed)
                raise ValueError(f"tfring: unexpected byte {kind!r} on the launcher's pipe")
            head = 1 + _LENGTH_DIGITS
            if len(self._pending) < head:
                break
            end = head + int(self._pending[1:head], 16)
            if len(self._pending) < end:
                break
            found.append(json.loads(self._pending[head:end]))
            self._pending = self._pending[end:]
        return found
