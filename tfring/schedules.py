"""Graph-side learning-rate schedules: warm-up around any schedule, step decay, polynomial decay.

Each is a `keras.optimizers.schedules.LearningRateSchedule` of the optimizer's step (iterations),
so it can be passed as an optimizer's `learning_rate`, is evaluated inside the train step (every
rank computes the same value from the same step count), and serializes with the model. The
callbacks in `tfring.callbacks` do the same per batch from Python, for optimizers built with a
float learning rate.
"""

import keras
import tensorflow as tf

# Keras' own polynomial decay (power, end rate, cycle) serves as is.
PolynomialDecay = keras.optimizers.schedules.PolynomialDecay


def _number(where, what, value, minimum=0.0, strict=False):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where}: {what} must be a number, got {value!r}")
    if value < minimum or (strict and value == minimum):
        raise ValueError(f"{where}: {what} must be {'>' if strict else '>='} {minimum}, got {value}")
    return value


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
            _number("WarmUp", "schedule (a target rate)", schedule)
        _number("WarmUp", "warmup_steps", warmup_steps)
        _number("WarmUp", "initial_learning_rate", initial_learning_rate)
        if mode not in ("gradual", "constant"):
            raise ValueError(f"WarmUp: mode must be 'gradual' or 'constant', got {mode!r}")
        self.schedule = schedule
        self.warmup_steps = int(warmup_steps)
        self.initial_learning_rate = float(initial_learning_rate)
        self.mode = mode

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        after = _schedule_value(self.schedule, step)
        if self.warmup_steps == 0:
            return after
        initial = tf.constant(self.initial_learning_rate, tf.float32)
        if self.mode == "constant":
            during = initial
        else:
            target = _schedule_value(self.schedule, tf.constant(self.warmup_steps, tf.float32))
            during = initial + (target - initial) * step / self.warmup_steps
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


@keras.saving.register_keras_serializable(package="tfring")
class MultiStepDecay(keras.optimizers.schedules.LearningRateSchedule):
    """`initial_learning_rate` times `factor` for every milestone the step has reached.

    Args:
        initial_learning_rate: the rate before the first milestone, >= 0.
        milestones: strictly increasing steps (ints > 0).
        factor: the multiplier at each milestone, > 0. Defaults to 0.1.

    Example:

    >>> schedule = MultiStepDecay(0.1, milestones=[3000, 6000, 8000], factor=0.1)
    >>> float(schedule(6500))  # two milestones passed
    0.001
    """

    def __init__(self, initial_learning_rate, milestones, factor=0.1):
        _number("MultiStepDecay", "initial_learning_rate", initial_learning_rate)
        _number("MultiStepDecay", "factor", factor, strict=True)
        milestones = check_milestones("MultiStepDecay", milestones)
        self.initial_learning_rate = float(initial_learning_rate)
        self.milestones = milestones
        self.factor = float(factor)

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        passed = tf.reduce_sum(tf.cast(step >= tf.constant(self.milestones, tf.float32), tf.float32))
        return self.initial_learning_rate * tf.pow(tf.constant(self.factor, tf.float32), passed)

    def get_config(self):
        return {"initial_learning_rate": self.initial_learning_rate, "milestones": list(self.milestones),
                "factor": self.factor}


def check_milestones(where, milestones):
    """Validates strictly increasing positive milestones.

    Args:
        where: the caller's name, for the error message.
        milestones: a list of numbers.

    Returns:
        The milestones as a list of ints.

    Raises:
        ValueError: empty, not numbers, not positive, or not strictly increasing.
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
