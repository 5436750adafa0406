"""`horovod.tensorflow.util`'s one helper that Horovod scripts and tests import."""

import tensorflow as tf


def _executing_eagerly():
    """Returns True when TensorFlow runs eagerly here (Horovod's helper of this name)."""
    return tf.executing_eagerly()
