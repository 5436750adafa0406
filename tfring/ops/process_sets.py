"""Process sets: collectives over some of the job's ranks (Horovod's `hvd.ProcessSet`, torch's `new_group`).

A process set is a list of job ranks with an id; pass the id as `process_set=` to any collective
in `tfring.ops` and only the set's ranks take part, on a ring of their own that carries nothing
else. Sets' collectives run independently of each other and of the whole job's (set 0), each set's
in the order its members submit them.

Every rank of the job calls `add_process_set` and `remove_process_set`, in the same order and with
the same ranks, as Horovod and torch require: the ranks first compare what they were given (an
allgather over the whole job), so a rank that passed other ranks makes every rank fail with the
same `ValueError` naming both lists, rather than some of them wait.
"""

import numbers

import numpy as np
import tensorflow as tf

from tfring import runtime
from tfring.ops import collectives


def _agree(what, values):
    """Raises ValueError on every rank unless every rank passed the same int list `values`."""
    mine = np.asarray([len(values)] + list(values), np.int64)
    gathered = collectives.allgather(tf.constant(mine)).numpy()
    lists, at = [], 0
    while at < len(gathered):
        count = int(gathered[at])
        lists.append([int(v) for v in gathered[at + 1:at + 1 + count]])
        at += 1 + count
    differ = [r for r, theirs in enumerate(lists) if theirs != lists[0]]
    if differ:
        raise ValueError(f"tfring.{what}: every rank must pass the same ranks, in the same order of calls; "
                         f"rank 0 passed {lists[0]}, rank {differ[0]} {lists[differ[0]]}")


def _ranks(what, ranks):
    """`ranks` as a sorted list of ints; ValueError for anything else (a float, a string, not a list)."""
    try:
        values = list(ranks)
    except TypeError as error:
        raise ValueError(f"tfring.{what}: ranks must be a list of ints, got {ranks!r}") from error
    if not all(isinstance(r, numbers.Integral) and not isinstance(r, bool) for r in values):
        raise ValueError(f"tfring.{what}: ranks must be a list of ints, got {values!r}")
    return sorted(int(r) for r in values)


def add_process_set(ranks):
    """Makes a process set of `ranks` and returns its id, to pass as `process_set=` to collectives.

    Every rank of the job must call it, with the same ranks. The members link a ring of their own
    before it returns (each waits for the others at most the rendezvous timeout).

    Args:
        ranks: a list of job ranks (any order; duplicates are refused).

    Returns:
        The set's id (int >= 1), the same on every rank.

    Raises:
        ValueError: on every rank, when ranks passed different lists, or a rank is out of range,
            repeated or not an int, or a set of the same ranks exists.
        TimeoutError: the set's members did not all come.

    Example:

    >>> evens = tfring.ops.add_process_set(range(0, tfring.size(), 2))
    >>> if tfring.rank() % 2 == 0:
    ...     tfring.ops.allreduce(tf.ones([2]), process_set=evens)
    """
    members = _ranks("add_process_set", ranks)
    _agree("add_process_set", members)
    return runtime.link_process_set(members)


def remove_process_set(process_set):
    """Removes a process set; its ring closes. Every rank of the job must call it.

    Args:
        process_set: the id `add_process_set` returned.

    Returns:
        True when the set existed and is removed; False for 0 (the whole job) or an unknown id.

    Raises:
        ValueError: on every rank, when ranks passed different ids.
        tf.errors.FailedPreconditionError: on the set's members, at once, when a member is inside
            one of the set's collectives while another removes it (the error names
            `remove_process_set` and the set).

    Example:

    >>> tfring.ops.remove_process_set(evens)
    True
    """
    process_set = int(process_set)
    if process_set != 0 and runtime.rank() in _members_or_none(process_set):
        # The members meet on the set's own ring first: one still inside a collective of the set
        # then disagrees with this barrier at once, naming it, instead of waiting for the job-wide
        # agreement below (which it never reaches) until the timeout.
        collectives.barrier(label=f"remove_process_set({process_set})", process_set=process_set)
    _agree("remove_process_set", [process_set])
    return runtime.unlink_process_set(process_set)


def _members_or_none(process_set):
    try:
        return runtime.process_set_ranks(process_set)
    except ValueError:
        return []  # an unknown id: removing it returns False


def process_set_ranks(process_set):
    """Returns the job ranks of a process set, ascending.

    Args:
        process_set: a set's id; 0 is the whole job.

    Returns:
        A list of ints.

    Raises:
        ValueError: there is no such set.

    Example:

    >>> tfring.ops.process_set_ranks(0)
    [0, 1]
    """
    return runtime.process_set_ranks(process_set)
