"""The job's hosts as process sets: where a compressor reduces exactly inside each host and
compresses only what crosses between hosts."""

import dataclasses

import tensorflow as tf

from tfring import runtime
from tfring.ops import collectives
from tfring.ops import process_sets


@dataclasses.dataclass(frozen=True)
class HostSets:
    """This rank's two process sets on a job of `hosts` hosts with `local_size` ranks each.

    Args:
        local: the set of this rank's host.
        cross: the set of the ranks with this rank's local rank, one on each host.
        local_size: ranks per host.
        local_rank: this rank's place on its host (and in `local`).
        hosts: the number of hosts.
        host: this rank's host (its place in `cross`).

    Example:

    >>> sets = host_sets()
    >>> tfring.ops.allreduce(x, process_set=sets.local)   # inside this host only
    """

    local: int
    cross: int
    local_size: int
    local_rank: int
    hosts: int
    host: int


def host_sets():
    """The job's hosts as process sets, made (or found) by every rank together.

    Every rank of the job must call it at the same point (it agrees on the layout with one small
    allgather, then adds the sets every rank adds); it runs eagerly even while a step is traced.

    Returns:
        A `HostSets`; None for a job that is not several hosts of several ranks each, numbered
        host by host (as `tfring run` numbers them), since there reducing inside a host first
        saves nothing or cannot be cut evenly.

    Example:

    >>> sets = host_sets()   # 2 hosts x 2 ranks: sets.local holds [0, 1] on ranks 0 and 1
    """
    with tf.init_scope():
        size = runtime.size()
        if size == 1:
            return None
        mine = tf.constant([runtime.local_rank(), runtime.local_size()], tf.int32)
        layout = collectives.allgather(mine).numpy().reshape(size, 2).tolist()
        per_host = layout[0][1]
        laid_out = 1 < per_host < size and all(layout[r] == [r % per_host, per_host] for r in range(size))
        if not laid_out:
            return None
        locals_ = [_set(range(h, h + per_host)) for h in range(0, size, per_host)]
        crosses = [_set(range(k, size, per_host)) for k in range(per_host)]
        rank = runtime.rank()
        return HostSets(local=locals_[rank // per_host], cross=crosses[rank % per_host], local_size=per_host,
                        local_rank=rank % per_host, hosts=size // per_host, host=rank // per_host)


def _set(ranks):
    ranks = list(ranks)
    found = runtime.process_set_id(ranks)
    return process_sets.add_process_set(ranks) if found is None else found
