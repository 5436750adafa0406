"""tfring's TensorFlow ops: fused ring allreduce, broadcast, allgather and barrier."""

from tfring.ops.collectives import allgather
from tfring.ops.collectives import allreduce
from tfring.ops.collectives import barrier
from tfring.ops.collectives import broadcast
from tfring.ops.collectives import broadcast_variables

__all__ = ["allreduce", "broadcast", "allgather", "barrier", "broadcast_variables"]
