"""Step decay (×factor at each milestone, the ResNet-50 recipe): the formula and `MultiStepDecay`."""

import keras
import tensorflow as tf

from tfring import checks


def check_milestones(where, milestones):
    """Validates strictly increasing positive milestones.

    Args:
        where: the caller's name, for the error message.
        milestones: a list of numbers.

    Returns:
        The milestones as a list of ints.

    Raises:
        ValueError: empty, not numbers, not positive, or not strictly increasing.

    Example:

    >>> check_milestones("MultiStepDecay", [30, 60, 80])
    [30, 60, 80]
    """
    if isinstance(milestones, (str, bytes)) or not hasattr(milestones, "__iter__"):
        raise ValueError(f"{where}: milestones must be a list of increasing numbers, got {milestones!r}")
    milestones = list(milestones)
    if not milestones:
        raise ValueError(f"{where}: milestones must not be empty")
    for m in milestones:
        if isinstance(m, bool) or not isinstance(m, (int, float)) or m <= 0 or m != int(m):
            raise ValueError(f"{where}: milestones must be positive whole numbers, got {milestones!r}")
    if any(b <= a for a, b in zip(milestones, milestones[1:])):
        raise ValueError(f"{where}: milestones must be strictly increasing, got {milestones!r}")
    return [int(m) for m in milestones]


def multi_step_rate(position, initial, milestones, factor):
    """`initial` times `factor` for every milestone that `position` has reached.

    Python numbers or a tensor `position`: `MultiStepDecay` calls it on steps,
    `tfring.callbacks.MultiStepDecay` on epochs.

    Args:
        position: where training is (a step, an epoch).
        initial: the rate before the first milestone.
        milestones: increasing positions, in the unit of `position`.
        factor: the multiplier at each milestone.

    Returns:
        The rate: a number, or a tensor (of `position`'s dtype) when `position` is one.

    Example:

    >>> multi_step_rate(65, 1.0, milestones=[30, 60, 80], factor=0.5)
    0.25
    """
    if tf.is_tensor(position):
        reached = tf.reduce_sum(tf.cast(position >= tf.constant(milestones, position.dtype), position.dtype))
    else:
        reached = sum(1 for m in milestones if position >= m)
    return initial * factor ** reached


@keras.saving.register_keras_serializable(package="tfring")
class MultiStepDecay(keras.optimizers.schedules.LearningRateSchedule):
    """`initial_learning_rate` times `factor` for every milestone the step has reached.

    Args:
        initial_learning_rate: the rate before the first milestone, >= 0.
        milestones: strictly increasing steps (ints > 0).
        factor: the multiplier at each milestone, > 0. Defaults to 0.1.

    Example:

    >>> schedule = MultiStepDecay(0.1, milestones=[3000, 6000, 8000], factor=0.1)
    >>> round(float(schedule(6500)), 6)  # two milestones passed
    0.001
    """

    def __init__(self, initial_learning_rate, milestones, factor=0.1):
        self.initial_learning_rate = checks.number("MultiStepDecay", "initial_learning_rate", initial_learning_rate,
                                                   at_least=0)
        self.factor = checks.number("MultiStepDecay", "factor", factor, above=0)
        self.milestones = check_milestones("MultiStepDecay", milestones)

    def __call__(self, step):
        return multi_step_rate(tf.cast(step, tf.float32), self.initial_learning_rate, self.milestones, self.factor)

    def get_config(self):
        return {"initial_learning_rate": self.initial_learning_rate, "milestones": list(self.milestones),
                "factor": self.factor}
