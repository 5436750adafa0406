"""Learning-rate schedules: warm-up around any schedule, step decay, polynomial decay; and the
learning-rate scaling rules for larger global batches (`scale_learning_rate`, in `lr_scaling`).

Each is a `keras.optimizers.schedules.LearningRateSchedule` of the optimizer's step (iterations),
so it can be passed as an optimizer's `learning_rate`, is evaluated inside the train step (every
rank computes the same value from the same step count), and serializes with the model.

Each schedule's formula is one function beside it (`warm_up_rate`, `multi_step_rate`,
`polynomial_decay_rate`), which the callbacks in `tfring.callbacks` evaluate per batch in
epochs, for optimizers built with a float learning rate.
"""

__all__ = ["WarmUp", "MultiStepDecay", "PolynomialDecay", "scale_learning_rate"]

# The schedules import Keras; `scale_learning_rate` (plain Python) is what `import tfring` takes.
_HOMES = {"WarmUp": "warm_up", "MultiStepDecay": "multi_step_decay", "PolynomialDecay": "polynomial_decay",
          "scale_learning_rate": "lr_scaling"}


def __getattr__(name):
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(f"tfring.schedules.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'tfring.schedules' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
