"""`hvd.callbacks`: Horovod's Keras callbacks (see `tfring.horovod.callbacks`)."""

from tfring.horovod.callbacks import BestModelCheckpoint
from tfring.horovod.callbacks import BroadcastGlobalVariablesCallback
from tfring.horovod.callbacks import LearningRateScheduleCallback
from tfring.horovod.callbacks import LearningRateWarmupCallback
from tfring.horovod.callbacks import MetricAverageCallback

__all__ = ["BestModelCheckpoint", "BroadcastGlobalVariablesCallback", "LearningRateScheduleCallback",
           "LearningRateWarmupCallback", "MetricAverageCallback"]
