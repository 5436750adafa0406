"""tfring's TensorFlow ops: fused ring allreduce, broadcast, allgather, reducescatter, alltoall,
barrier, join, process sets and the fused LARS update.

The names load on first use, so `import tfring` (and the `tfring run` launcher) does not import
TensorFlow.
"""

from tfring.ops import collective_gradients  # noqa: F401 (registers the collectives' gradients)

__all__ = ["allreduce", "allreduce_buckets", "broadcast", "allgather", "reducescatter", "alltoall", "barrier",
           "join", "broadcast_variables", "lars_update", "add_process_set", "remove_process_set", "process_set_ranks"]
_PROCESS_SETS = ("add_process_set", "remove_process_set", "process_set_ranks")


def __getattr__(name):
    if name == "lars_update":
        from tfring.ops import lars

        return lars.lars_update
    if name in _PROCESS_SETS:
        from tfring.ops import process_sets

        return getattr(process_sets, name)
    if name == "allreduce_buckets":
        from tfring.ops import started

        return started.allreduce_buckets
    if name in __all__:
        from tfring.ops import collectives

        return getattr(collectives, name)
    raise AttributeError(f"module 'tfring.ops' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
