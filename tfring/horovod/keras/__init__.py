"""`import tfring.horovod.keras as hvd`: Horovod's `horovod.keras` API, the same as
`tfring.horovod.tensorflow.keras` (Keras 3 is one Keras)."""

from tfring.horovod.tensorflow.keras import *  # noqa: F401,F403
from tfring.horovod.tensorflow.keras import __all__  # noqa: F401
