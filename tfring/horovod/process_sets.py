"""Horovod's process sets (`hvd.ProcessSet`, `hvd.add_process_set`, `process_set=`) on tfring's.

A set registered with `hvd.init(process_sets=[...])` or `hvd.add_process_set` is a tfring process
set (`tfring.ops.add_process_set`): its members run its collectives on a ring of their own. As in
Horovod, every rank registers the same sets in the same order, `root_rank` stays a job rank, and
a collective on a set this rank is not in fails with `tf.errors.InvalidArgumentError`. Adding sets
after `hvd.init` needs no `HOROVOD_DYNAMIC_PROCESS_SETS` here: it is always allowed.
"""

import numbers

from tfring import runtime
from tfring.ops import process_sets as ring_sets


class ProcessSet:
    """A set of ranks a collective runs over (Horovod's `hvd.ProcessSet`).

    Args:
        ranks: the job ranks in the set (a list of ints). An MPI communicator is not supported:
            tfring has no MPI inside it.

    Example:

    >>> evens = hvd.ProcessSet([0, 2])
    >>> hvd.init(process_sets=[evens])
    >>> evens.size(), evens.included()
    (2, True)
    """

    process_set_id = None

    def __init__(self, ranks):
        try:
            values = list(ranks)
        except TypeError:
            raise ValueError("ProcessSet should be initialized with a list of process ranks (tfring.horovod has no "
                             "MPI communicators)") from None
        if not all(isinstance(r, numbers.Integral) and not isinstance(r, bool) for r in values):
            raise ValueError(f"ProcessSet should be initialized with a list of process ranks, got {values!r}")
        self.ranks = sorted(int(r) for r in values)

    def _invalidate(self):
        self.process_set_id = None

    def size(self):
        """Returns the number of ranks in the set, or None before it is registered."""
        return None if self.process_set_id is None else len(runtime.process_set_ranks(self.process_set_id))

    def rank(self):
        """Returns this process's rank within the set (None before registration or outside the set)."""
        if self.process_set_id is None:
            return None
        members = runtime.process_set_ranks(self.process_set_id)
        return members.index(runtime.rank()) if runtime.rank() in members else None

    def included(self):
        """Returns whether this process belongs to the set (None before registration of the global set)."""
        if self.process_set_id == 0:
            return True
        return None if self.ranks is None else runtime.rank() in self.ranks

    def __repr__(self):
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"


global_process_set = ProcessSet([])
"""Every rank of the job (process set id 0): the default `process_set` of every collective."""
global_process_set.process_set_id = 0


def register(process_sets):
    """Registers Horovod's static process sets at `hvd.init(process_sets=...)`.

    A set whose ranks are registered already (an `init` called again) takes that set's id;
    a second object with the same ranks in the same list is invalidated, as in Horovod.

    Args:
        process_sets: a list of `ProcessSet`, or "dynamic" (Horovod's switch; sets may always be added here).
    """
    global_process_set.ranks = list(range(runtime.size()))
    if process_sets in (None, "dynamic"):
        return
    seen = {0}
    for ps in process_sets:
        if not isinstance(ps, ProcessSet):
            raise ValueError(f"hvd.init: process_sets must be a list of hvd.ProcessSet, got {ps!r}")
        found = runtime.process_set_id(ps.ranks)
        ps.process_set_id = found if found is not None else ring_sets.add_process_set(ps.ranks)
        if ps.process_set_id in seen:
            ps._invalidate()
        seen.add(ps.process_set_id)


def add_process_set(process_set):
    """Registers a process set after `hvd.init` (Horovod's `hvd.add_process_set`); every rank calls it.

    Args:
        process_set: a `ProcessSet` or a list of ranks.

    Returns:
        The registered `ProcessSet`.

    Raises:
        ValueError: a set of these ranks exists, or ranks disagree (on every rank).

    Example:

    >>> odds = hvd.add_process_set([1, 3])
    """
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if runtime.process_set_id(process_set.ranks) is not None:
        raise ValueError(f"Attempted to add a duplicate process set: {process_set}")
    process_set.process_set_id = ring_sets.add_process_set(process_set.ranks)
    return process_set


def remove_process_set(process_set):
    """Removes a registered process set (Horovod's `hvd.remove_process_set`); every rank calls it.

    Returns:
        True when it was removed; False for the global set or one not registered.
    """
    set_id = process_set.process_set_id
    if set_id in (None, 0):
        return False
    process_set._invalidate()
    return ring_sets.remove_process_set(set_id)


def set_id(process_set, where):
    """The tfring process set id behind `process_set`, for `process_set=` of tfring's collectives.

    Args:
        process_set: a `ProcessSet`.
        where: the public name called, for the message.

    Raises:
        ValueError: `process_set` is not registered (no id, or an id tfring does not know).
    """
    found = getattr(process_set, "process_set_id", None)
    if found is None:
        raise ValueError(f"{where}: {process_set!r} is not registered: pass it to hvd.init(process_sets=[...]) or "
                         f"hvd.add_process_set first")
    if found != 0:
        try:
            runtime.process_set_ranks(found)
        except ValueError as error:
            raise ValueError(f"{where}: {error}") from None
    return found


def members(process_set):
    """The job ranks of a registered `process_set`."""
    return runtime.process_set_ranks(process_set.process_set_id)
