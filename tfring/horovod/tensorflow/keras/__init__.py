"""`import tfring.horovod.tensorflow.keras as hvd`: Horovod's `horovod.tensorflow.keras` API on tfring.

See `tfring.horovod` for what differs from Horovod. Example:

>>> import tfring.horovod.tensorflow.keras as hvd
>>> hvd.init()
>>> model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01 * hvd.size())), loss="mse")
>>> model.fit(x, y, batch_size=64, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
"""

import keras
import tensorflow as tf

from tfring.horovod import broadcasts as _broadcasts
from tfring.horovod import collectives as _collectives
from tfring.horovod import elastic
from tfring.horovod import optimizer as _optimizer
from tfring.horovod.basics import Average
from tfring.horovod.basics import Sum
from tfring.horovod.basics import ccl_built
from tfring.horovod.basics import cross_rank
from tfring.horovod.basics import cross_size
from tfring.horovod.basics import cuda_built
from tfring.horovod.basics import ddl_built
from tfring.horovod.basics import gloo_built
from tfring.horovod.basics import gloo_enabled
from tfring.horovod.basics import init
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
from tfring.horovod.broadcasts import broadcast_global_variables
from tfring.horovod.compression import Compression
from tfring.horovod.optimizer import DistributedOptimizer
from tfring.horovod.process_sets import ProcessSet
from tfring.horovod.process_sets import add_process_set
from tfring.horovod.process_sets import global_process_set
from tfring.horovod.process_sets import remove_process_set
from tfring.horovod import keras2_switches as _keras2_switches
from tfring.horovod.tensorflow.keras import callbacks

_keras2_switches.install()  # Horovod's Keras examples compile with experimental_run_tf_function

__all__ = [
    "Average", "Sum", "ccl_built", "cross_rank", "cross_size", "cuda_built", "ddl_built", "gloo_built",
    "gloo_enabled", "init", "is_initialized", "local_rank", "local_size", "mpi_built", "mpi_enabled",
    "mpi_threads_supported", "nccl_built", "rank", "rocm_built", "shutdown", "size", "start_timeline",
    "stop_timeline", "broadcast_global_variables", "Compression", "DistributedOptimizer", "ProcessSet",
    "add_process_set", "global_process_set", "remove_process_set", "callbacks", "allreduce", "allgather",
    "broadcast", "reducescatter", "load_model", "elastic"
]


def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0, op=None,
              compression=Compression.none):
    """Reduces a value (a number, array or tensor) over the ranks; averages by default (Horovod's keras `allreduce`).

    Returns:
        A tensor, identical on every rank.

    Example:

    >>> hvd.allreduce(np.float32(hvd.rank()))
    """
    return _collectives.allreduce(tf.convert_to_tensor(value), average=average, compression=compression, op=op,
                                  prescale_factor=prescale_factor, postscale_factor=postscale_factor)


def allgather(value, name=None):
    """Concatenates every rank's value along the first dimension (Horovod's keras `allgather`).

    Returns:
        A tensor, identical on every rank.
    """
    return _collectives.allgather(tf.convert_to_tensor(value))


def broadcast(value, root_rank, name=None):
    """The root's value on every rank (Horovod's keras `broadcast`).

    Returns:
        A tensor.
    """
    return _broadcasts.broadcast(tf.convert_to_tensor(value), root_rank)


def reducescatter(value, name=None, op=Average):
    """Reduces a tensor and gives each rank its share of the rows (Horovod's keras `reducescatter`).

    As `tfring.horovod.collectives.reducescatter`, with `op` `hvd.Average` by default.

    Returns:
        This rank's rows of the reduced tensor.
    """
    return _collectives.reducescatter(value, op=op)


def load_model(filepath, custom_optimizers=None, custom_objects=None, compression=Compression.none,
               legacy_opts=False):
    """Loads a Keras model and makes its optimizer distributed, its state kept (Horovod's `hvd.load_model`).

    Args:
        filepath: a `.keras` file (or what `keras.models.load_model` reads).
        custom_optimizers: optimizer classes the file names that Keras does not know.
        custom_objects: Keras' `custom_objects`.
        compression: as `DistributedOptimizer`'s.
        legacy_opts: ignored (Keras 3 has no legacy optimizers).

    Returns:
        The model, compiled as saved, with a distributed optimizer.

    Example:

    >>> model = hvd.load_model("checkpoint.keras")
    """
    objects = dict(custom_objects or {})
    for cls in custom_optimizers or []:
        objects.setdefault(cls.__name__, cls)
    model = keras.models.load_model(filepath, custom_objects=objects or None)
    if getattr(model, "optimizer", None) is not None:
        _optimizer.distribute(model.optimizer, compression=compression)
    return model
