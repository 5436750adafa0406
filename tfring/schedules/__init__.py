"""Learning-rate schedules: warm-up around any schedule, step decay, polynomial decay.

Each is a `keras.optimizers.schedules.LearningRateSchedule` of the optimizer's step (iterations),
so it can be passed as an optimizer's `learning_rate`, is evaluated inside the train step (every
rank computes the same value from the same step count), and serializes with the model.

Each schedule's formula is one function beside it (`warm_up_rate`, `multi_step_rate`,
`polynomial_decay_rate`), which the callbacks in `tfring.callbacks` evaluate per batch in
epochs, for optimizers built with a float learning rate.
"""

from tfring.schedules.multi_step_decay import MultiStepDecay
from tfring.schedules.polynomial_decay import PolynomialDecay
from tfring.schedules.warm_up import WarmUp

__all__ = ["WarmUp", "MultiStepDecay", "PolynomialDecay"]
