"""Do the ranks hold the same things? One comparison of named digests across ranks.

What every rank passes to `fit` (its NumPy inputs: `input_digest`) and the model it built
(`model_fingerprint`) must be the same on every rank; a difference trains silently on something
no single process would. Each check reduces what it compares to named 63-bit digests, and
`differences` compares them: one allgather of two numbers when everything agrees, a second one
(of every digest) only to name what differs. Both allgathers are made by every rank or none, so
the ranks stay in step whatever they find.
"""

import hashlib
import json

import numpy as np
import tensorflow as tf

from tfring.ops import collectives


def digest(data):
    """A 63-bit digest of bytes, or of a JSON-able value (keys sorted; what JSON lacks is repr'd).

    Args:
        data: bytes, or a value of dicts, lists, strings and numbers.

    Returns:
        A non-negative int.

    Example:

    >>> digest({"units": 3}) == digest({"units": 3})
    True
    """
    if not isinstance(data, bytes):
        data = json.dumps(data, sort_keys=True, default=repr).encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little") >> 1


def _gather(values):
    """Every rank's int64 `values` (one row per rank, all of one length)."""
    return collectives.allgather(tf.constant([values], tf.int64)).numpy()


def differences(labels, digests):
    """Compares this rank's named digests with every other rank's. Every rank must call it.

    Args:
        labels: this rank's names for its digests.
        digests: ints, one per label.

    Returns:
        None when every rank's digests equal rank 0's; else `(ranks, names)`: the ranks whose
        digests differ from rank 0's, and the labels that differ for the first of them (None when
        that rank has another number of digests).

    Example:

    >>> differences(["x", "y"], [digest(b"x"), digest(b"y")])   # the same on every rank
    """
    whole = digest(np.array(digests, np.int64).tobytes())
    summary = _gather([whole, len(digests)])
    if (summary == summary[0]).all():
        return None
    longest = int(summary[:, 1].max())  # every rank knows it: the second allgather has one length
    everyone = _gather([len(digests)] + list(digests) + [0] * (longest - len(digests)))
    everyone = [row[:row[0] + 1] for row in everyone]
    ranks = [r for r in range(1, len(everyone)) if not np.array_equal(everyone[r], everyone[0])]
    first = everyone[ranks[0]]
    if first[0] != everyone[0][0]:
        return ranks, None
    return ranks, [label for k, label in enumerate(labels) if first[k + 1] != everyone[0][k + 1]]
