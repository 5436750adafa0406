"""`hvd.callbacks` of `tfring.horovod.keras` (see `tfring.horovod.callbacks`)."""

from tfring.horovod.tensorflow.keras.callbacks import *  # noqa: F401,F403
from tfring.horovod.tensorflow.keras.callbacks import __all__  # noqa: F401
