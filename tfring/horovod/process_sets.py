"""Horovod's process sets: today only the global one (every rank of the job).

`process_set=` is accepted wherever Horovod takes it; a set other than `global_process_set`
raises NotImplementedError, so no collective silently runs over the wrong ranks.
"""

from tfring import runtime


class ProcessSet:
    """A set of ranks a collective runs over (Horovod's `hvd.ProcessSet`).

    Args:
        ranks: the ranks in the set; None for every rank of the job.

    Example:

    >>> hvd.global_process_set.size()
    2
    """

    def __init__(self, ranks=None):
        self.ranks = None if ranks is None else sorted(int(r) for r in ranks)
        self.process_set_id = 0 if ranks is None else None

    def size(self):
        """Returns the number of ranks in the set."""
        return runtime.size() if self.ranks is None else len(self.ranks)

    def rank(self):
        """Returns this process's rank within the set (None outside it)."""
        if self.ranks is None:
            return runtime.rank()
        return self.ranks.index(runtime.rank()) if runtime.rank() in self.ranks else None

    def included(self):
        """Returns True when this process belongs to the set."""
        return self.ranks is None or runtime.rank() in self.ranks

    def __repr__(self):
        return "ProcessSet(global)" if self.ranks is None else f"ProcessSet(ranks={self.ranks})"


global_process_set = ProcessSet()


def add_process_set(process_set):
    """Horovod's `hvd.add_process_set`: not supported yet.

    Raises:
        NotImplementedError: always.
    """
    raise NotImplementedError("tfring.horovod.add_process_set: process sets other than the global one are not "
                              "supported yet; collectives run over the whole job")


def remove_process_set(process_set):
    """Horovod's `hvd.remove_process_set`: only sets `add_process_set` made can be removed, and it makes none.

    Returns:
        False.
    """
    return False


def check_global(process_set, where):
    """Raises NotImplementedError unless `process_set` is the global set.

    Args:
        process_set: the caller's `process_set=`.
        where: the public name called, for the message.
    """
    if process_set is not global_process_set and getattr(process_set, "ranks", 0) is not None:
        raise NotImplementedError(f"{where}: process_set={process_set!r}: only hvd.global_process_set is "
                                  f"supported yet")
