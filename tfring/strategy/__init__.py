"""Distribution: `RingStrategy` and the `tfring run` launcher."""

__all__ = ["RingStrategy"]


def __getattr__(name):
    # RingStrategy imports TensorFlow; the launcher (same package) must start without it.
    if name == "RingStrategy":
        from tfring.strategy.ring_strategy import RingStrategy

        return RingStrategy
    raise AttributeError(f"module 'tfring.strategy' has no attribute {name!r}")
