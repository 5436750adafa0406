"""`import tfring.horovod.tensorflow as hvd`: Horovod's `horovod.tensorflow` API on tfring.

See `tfring.horovod` for what differs from Horovod. Example:

>>> import tfring.horovod.tensorflow as hvd
>>> hvd.init()
>>> tape = hvd.DistributedGradientTape(tape)
"""

from tfring.horovod import elastic
from tfring.horovod.basics import Adasum
from tfring.horovod.basics import Average
from tfring.horovod.basics import Max
from tfring.horovod.basics import Min
from tfring.horovod.basics import Product
from tfring.horovod.basics import Sum
from tfring.horovod.basics import ccl_built
from tfring.horovod.basics import cross_rank
from tfring.horovod.basics import cross_size
from tfring.horovod.basics import cuda_built
from tfring.horovod.basics import ddl_built
from tfring.horovod.basics import gloo_built
from tfring.horovod.basics import gloo_enabled
from tfring.horovod.basics import init
from tfring.horovod.basics import is_homogeneous
from tfring.horovod.basics import is_initialized
from tfring.horovod.basics import local_rank
from tfring.horovod.basics import local_size
from tfring.horovod.basics import mpi_built
from tfring.horovod.basics import mpi_enabled
from tfring.horovod.basics import mpi_threads_supported
from tfring.horovod.basics import nccl_built
from tfring.horovod.basics import rank
from tfring.horovod.basics import rocm_built
from tfring.horovod.basics import shutdown
from tfring.horovod.basics import size
from tfring.horovod.basics import start_timeline
from tfring.horovod.basics import stop_timeline
from tfring.horovod.collectives import allgather
from tfring.horovod.broadcasts import allgather_object
from tfring.horovod.collectives import allreduce
from tfring.horovod.collectives import alltoall
from tfring.horovod.collectives import barrier
from tfring.horovod.broadcasts import broadcast
from tfring.horovod.broadcasts import broadcast_
from tfring.horovod.broadcasts import broadcast_global_variables
from tfring.horovod.broadcasts import broadcast_object
from tfring.horovod.broadcasts import broadcast_object_fn
from tfring.horovod.broadcasts import broadcast_variables
from tfring.horovod.collectives import grouped_allgather
from tfring.horovod.collectives import grouped_allreduce
from tfring.horovod.collectives import grouped_reducescatter
from tfring.horovod.collectives import join
from tfring.horovod.collectives import local_rank_op
from tfring.horovod.collectives import local_size_op
from tfring.horovod.collectives import rank_op
from tfring.horovod.collectives import reducescatter
from tfring.horovod.collectives import process_set_included_op
from tfring.horovod.collectives import size_op
from tfring.horovod.compression import Compression
from tfring.horovod.gradient_tape import DistributedGradientTape
from tfring.horovod.gradient_tape import PartialDistributedGradientTape
from tfring.horovod.optimizer import tensorflow_distributed_optimizer as DistributedOptimizer
from tfring.horovod.process_sets import ProcessSet
from tfring.horovod.process_sets import add_process_set
from tfring.horovod.process_sets import global_process_set
from tfring.horovod.process_sets import remove_process_set
from tfring.horovod.sync_batch_norm import SyncBatchNormalization
from tfring.horovod.tensorflow.util import _executing_eagerly  # noqa: F401 (Horovod's module has it too)

__all__ = [
    "Adasum", "Average", "Max", "Min", "Product", "Sum", "ccl_built", "cross_rank", "cross_size",
    "cuda_built", "ddl_built", "gloo_built", "gloo_enabled", "init", "is_homogeneous", "is_initialized",
    "local_rank", "local_size", "mpi_built", "mpi_enabled", "mpi_threads_supported", "nccl_built", "rank",
    "rocm_built", "shutdown", "size", "start_timeline", "stop_timeline", "allgather", "allgather_object",
    "allreduce", "alltoall", "barrier", "broadcast", "broadcast_", "broadcast_global_variables", "broadcast_object",
    "broadcast_object_fn",
    "broadcast_variables", "grouped_allgather", "grouped_allreduce", "grouped_reducescatter", "join",
    "local_rank_op", "local_size_op", "rank_op", "reducescatter", "size_op", "process_set_included_op", "elastic", "Compression",
    "DistributedGradientTape", "PartialDistributedGradientTape", "DistributedOptimizer", "ProcessSet",
    "add_process_set", "global_process_set", "remove_process_set", "SyncBatchNormalization"
]
