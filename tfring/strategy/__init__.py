"""Distribution: `RingStrategy`, a `tf.distribute` strategy of one replica per process, and the
Keras wrappers it installs (keras_patches.py lists them)."""

__all__ = ["RingStrategy"]


def __getattr__(name):
    # RingStrategy imports TensorFlow: load it when asked for.
    if name == "RingStrategy":
        from tfring.strategy.ring_strategy import RingStrategy

        return RingStrategy
    raise AttributeError(f"module 'tfring.strategy' has no attribute {name!r}")
