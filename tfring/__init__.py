"""tfring: synchronous data-parallel training for Keras 3 and TensorFlow over a fused ring allreduce.

    import tfring
    tfring.init()
    print(tfring.rank(), tfring.size())

Launch several processes with `tfring run -np 4 python train.py` (or mpirun, srun, a Kubernetes
operator), or run a function as a job from a notebook with `tfring.run(fn, np=2)`.
"""

from tfring.runtime import init
from tfring.runtime import is_initialized
from tfring.runtime import local_rank
from tfring.runtime import local_size
from tfring.runtime import rank
from tfring.runtime import shutdown
from tfring.runtime import size
from tfring.runtime import traffic
from tfring.runtime import transport_name
from tfring.schedules.lr_scaling import scale_learning_rate
from tfring.chief import RankFilter
from tfring.chief import is_chief
from tfring.chief import print0
from tfring.keras_registration import register_when_keras_loads
from tfring.version import __version__
from tfring.launch.function_launcher import run

register_when_keras_loads()

__all__ = ["init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
           "transport_name", "traffic", "ops", "RingStrategy", "compression", "optimizers", "callbacks",
           "schedules", "data", "elastic", "scale_learning_rate", "is_chief", "print0", "RankFilter", "broadcast_object",
           "allgather_object", "run"]


def __getattr__(name):
    # These import TensorFlow: load them only when asked for.
    import importlib

    if name in ("ops", "compression", "optimizers", "callbacks", "schedules", "data", "elastic"):
        return importlib.import_module(f"tfring.{name}")
    if name in ("broadcast_object", "allgather_object"):
        return getattr(importlib.import_module("tfring.ops.objects"), name)
    if name == "RingStrategy":
        return importlib.import_module("tfring.strategy.ring_strategy").RingStrategy
    raise AttributeError(f"module 'tfring' has no attribute {name!r}")
