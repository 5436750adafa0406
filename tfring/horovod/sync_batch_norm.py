"""`hvd.SyncBatchNormalization`: batch normalization whose batch statistics cover every rank's batch."""

import keras
import tensorflow as tf

from tfring import runtime
from tfring.ops import collectives as ring
from tfring.strategy import keras_patches

KERAS_INTERNALS = [
    keras_patches.Internal("keras.layers.BatchNormalization", "_moments", ("self", "inputs", "mask"),
                           "SyncBatchNormalization computes the job's moments where Keras computes the batch's"),
]


class SyncBatchNormalization(keras.layers.BatchNormalization):
    """`keras.layers.BatchNormalization` whose training-time mean and variance are the job's: each
    rank's sums over its batch (and the mask, if any) are all-reduced before dividing, so every rank
    normalizes with the statistics of all ranks' rows, as one process would over the whole batch
    (Horovod's `hvd.SyncBatchNormalization`). Inference uses the moving statistics, as usual.
    It takes the arguments of `keras.layers.BatchNormalization`.

    Example:

    >>> model = keras.Sequential([keras.Input((8,)), hvd.SyncBatchNormalization(), keras.layers.Dense(1)])
    """

    def _moments(self, inputs, mask):
        if runtime.size() == 1:
            return super()._moments(inputs, mask)
        axes = self._reduction_axes
        weights = tf.ones_like(inputs) if mask is None else tf.cast(
            tf.broadcast_to(tf.expand_dims(mask, -1), tf.shape(inputs)), inputs.dtype)
        sums = [tf.reduce_sum(inputs * weights, axes), tf.reduce_sum(tf.square(inputs) * weights, axes),
                tf.reduce_sum(weights, axes)]
        total, squares, count = ring.allreduce(sums, op="sum")
        count = tf.maximum(count, keras.backend.epsilon())
        mean = total / count
        return mean, tf.maximum(squares / count - tf.square(mean), 0.0)
