"""Learning-rate warm-up (Goyal et al. 2017): the formula, and `WarmUp` around any schedule."""

import keras
import tensorflow as tf

from tfring import checks

MODES = ("gradual", "constant")


def warm_up_rate(position, length, start, end, mode="gradual"):
    """The rate during a warm-up of `length` that goes from `start` to `end`.

    Gradual: a linear ramp, `start` at position 0 and `end` at `length`. Constant: `start`
    throughout (the caller switches to `end` at `length`). Python numbers or tensors: `WarmUp`
    calls it on steps, `tfring.callbacks.LearningRateWarmup` on (fractional) epochs.

    Args:
        position: how far the warm-up is, 0 <= position < length.
        length: the warm-up's length, > 0, in the unit of `position`.
        start: the rate at position 0.
        end: the rate the ramp reaches at `length` (unused when constant).
        mode: "gradual" or "constant". Defaults to "gradual".

    Returns:
        The rate at `position`: a number, or a tensor when an argument is one.

    Example:

    >>> warm_up_rate(1.25, 5, start=0.1, end=3.2)
    0.875
    """
    if mode == "constant":
        return start
    return start + (end - start) * position / length


def _schedule_value(schedule, step):
    if isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
        return tf.cast(schedule(step), tf.float32)
    return tf.constant(float(schedule), tf.float32)


@keras.saving.register_keras_serializable(package="tfring")
class WarmUp(keras.optimizers.schedules.LearningRateSchedule):
    """Warm-up for the first `warmup_steps` steps, then `schedule` (Goyal et al. 2017).

    Gradual: the rate rises linearly from `initial_learning_rate` at step 0 to the value
    `schedule` has at `warmup_steps`. Constant: it stays at `initial_learning_rate`, then jumps.
    After the warm-up the wrapped schedule is evaluated at the optimizer's step as is (not
    shifted), so a decay's milestones keep their meaning.

    Args:
        schedule: a `LearningRateSchedule` or a float (the target rate).
        warmup_steps: steps of warm-up, >= 0 (0: no warm-up).
        initial_learning_rate: the rate at step 0, >= 0. Defaults to 0.
        mode: "gradual" or "constant".

    Example:

    >>> steps = 100  # per epoch
    >>> lr = WarmUp(MultiStepDecay(3.2, [30 * steps, 60 * steps, 80 * steps], 0.1),
    ...             warmup_steps=5 * steps, initial_learning_rate=0.1)
    >>> optimizer = tfring.optimizers.LARS(lr)
    """

    def __init__(self, schedule, warmup_steps, initial_learning_rate=0.0, mode="gradual"):
        if not isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
            checks.number("WarmUp", "schedule (a target rate)", schedule, at_least=0)
        warmup_steps = checks.number("WarmUp", "warmup_steps", warmup_steps, at_least=0)
        initial_learning_rate = checks.number("WarmUp", "initial_learning_rate", initial_learning_rate, at_least=0)
        self.schedule = schedule
        self.warmup_steps = int(warmup_steps)
        self.initial_learning_rate = initial_learning_rate
        self.mode = checks.choice("WarmUp", "mode", mode, MODES)

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        after = _schedule_value(self.schedule, step)
        if self.warmup_steps == 0:
            return after
        initial = tf.constant(self.initial_learning_rate, tf.float32)
        target = None
        if self.mode == "gradual":
            target = _schedule_value(self.schedule, tf.constant(self.warmup_steps, tf.float32))
        during = warm_up_rate(step, self.warmup_steps, initial, target, self.mode)
        return tf.where(step < self.warmup_steps, during, after)

    def get_config(self):
        schedule = self.schedule
        if isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
            schedule = keras.saving.serialize_keras_object(schedule)
        return {"schedule": schedule, "warmup_steps": self.warmup_steps,
                "initial_learning_rate": self.initial_learning_rate, "mode": self.mode}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config["schedule"], dict):
            config["schedule"] = keras.saving.deserialize_keras_object(config["schedule"])
        return cls(**config)
