"""`import tfring.horovod.keras as hvd`: Horovod's `horovod.keras` API, the same as
`tfring.horovod.tensorflow.keras` (Keras 3 is one Keras)."""

from tfring.horovod.tensorflow.keras import *  # noqa: F401,F403
from tfring.horovod.tensorflow.keras import __all__ as _tf_keras_names
from tfring.horovod.optimizer import PartialDistributedOptimizer  # noqa: F401 (horovod.keras only)

__all__ = _tf_keras_names + ["PartialDistributedOptimizer"]
