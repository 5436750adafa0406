"""Polynomial decay (the TPU LARS recipe): Keras' `PolynomialDecay`, and its formula on Python numbers."""

import keras

# Keras' own polynomial decay (power, end rate, cycle) serves as is.
PolynomialDecay = keras.optimizers.schedules.PolynomialDecay
"""Keras' own `keras.optimizers.schedules.PolynomialDecay`, exported with tfring's schedules."""


def polynomial_decay_rate(position, length, initial, end, power):
    """The rate `PolynomialDecay(initial, length, end, power)` has at `position` (cycle=False).

    (initial − end) · (1 − min(position, length) / length)^power + end, on Python numbers in
    float64: `tfring.callbacks.PolynomialDecay` calls it on (fractional) epochs since decay began.

    Args:
        position: how far the decay is, >= 0.
        length: where the rate reaches `end`, > 0, in the unit of `position`.
        initial: the rate at position 0.
        end: the rate from `length` on.
        power: the polynomial's power.

    Returns:
        A float.

    Example:

    >>> polynomial_decay_rate(5, 10, initial=1.0, end=0.0, power=2.0)
    0.25
    """
    done = min(position, length) / length
    return (initial - end) * (1.0 - done) ** power + end
