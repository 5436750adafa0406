"""Rank 0 speaks for the job: `is_chief()`, `print0()` and a logging filter.

Every rank runs the same script; what only one of them should do (print a summary, write a
report) is done on the chief, rank 0, as with Horovod's `hvd.rank() == 0`.
"""

import logging

from tfring.launch import cluster
from tfring import runtime


def _rank():
    """This process's rank, without starting tfring when it has not started yet (a `print0` at
    the top of a script must not run the rendezvous with default settings before the strategy's)."""
    if runtime.is_initialized():
        return runtime.rank()
    try:
        return cluster.discover().rank
    except ValueError:
        return runtime.rank()  # raises the clear error about the job's environment


def is_chief():
    """True on rank 0 (and in a process that is not part of a multi-rank job).

    Reads the rank from the launcher's environment when tfring has not started yet, so calling
    it first does not start tfring with default settings.

    Returns:
        A bool.

    Example:

    >>> if tfring.is_chief():
    ...     model.summary()
    """
    return _rank() == 0


def print0(*args, **kwargs):
    """`print` on rank 0 only; the other ranks print nothing.

    Args:
        *args: what `print` takes.
        **kwargs: what `print` takes (`sep`, `end`, `file`, `flush`).

    Example:

    >>> tfring.print0("global batch", 64 * tfring.size())
    """
    if is_chief():
        print(*args, **kwargs)


class RankFilter(logging.Filter):
    """A logging filter: rank 0 keeps every record; other ranks keep only the serious ones, prefixed.

    Args:
        level_elsewhere: the least level a record needs to be kept on ranks other than 0
            (default `logging.WARNING`: their INFO lines, the same on every rank, are dropped).

    Example:

    >>> handler = logging.StreamHandler()
    >>> handler.addFilter(tfring.RankFilter())
    >>> logging.getLogger().addHandler(handler)
    """

    def __init__(self, level_elsewhere=logging.WARNING):
        super().__init__()
        self.level_elsewhere = level_elsewhere

    def filter(self, record):
        """Keeps `record` (prefixed with the rank on ranks other than 0), or drops it.

        Args:
            record: a `logging.LogRecord`.

        Returns:
            True to keep the record.
        """
        rank = _rank()
        if rank == 0:
            return True
        if record.levelno < self.level_elsewhere:
            return False
        if not getattr(record, "_tfring_prefixed", False):
            record.msg = f"[rank {rank}] {record.msg}"
            record._tfring_prefixed = True
        return True
