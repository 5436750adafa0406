"""The base of tfring's learning-rate callbacks: where training is (in epochs), reading and setting
the optimizer's rate (with momentum correction), and the rate in the epoch logs.

The callbacks only drive: each evaluates its schedule's formula (`tfring.schedules`) at the
current epoch and batch, in Python, the same on every rank.
"""

import keras


def _inner(optimizer):
    # A LossScaleOptimizer forwards learning_rate, but the momentum buffers live in its inner one.
    return getattr(optimizer, "inner_optimizer", optimizer)


def rescale_momentum(optimizer, factor):
    """Scales the momentum buffers that carry the learning rate (v = m·v + lr·g forms) by `factor`.

    An optimizer that knows its buffers says so with a `rescale_momentum(factor)` method
    (`tfring.optimizers.LARS` has one); Keras' SGD is handled here; other optimizers (e.g. Adam,
    whose moments do not carry the learning rate) are left alone.

    Args:
        optimizer: a Keras optimizer (LossScaleOptimizer: its inner optimizer is used).
        factor: the multiplier, new rate / old rate.

    Example:

    >>> rescale_momentum(model.optimizer, 0.5)
    """
    optimizer = _inner(optimizer)
    hook = getattr(optimizer, "rescale_momentum", None)
    if callable(hook):
        hook(factor)
    elif isinstance(optimizer, keras.optimizers.SGD) and optimizer.built and optimizer.momentum:
        for momentum in optimizer.momentums:
            if momentum is not None:
                momentum.assign(momentum * factor)


class LearningRateCallback(keras.callbacks.Callback):
    """Shared machinery: subclasses decide the rate; this sets it and reports it.

    Args:
        momentum_correction: when the rate changes from a to b, scale the momentum buffers by b/a
            (Goyal et al. 2017), so a jump in rate does not act on velocity built at the old rate.
        verbose: 1 prints a line when the callback changes phase.
    """

    def __init__(self, momentum_correction=True, verbose=0):
        super().__init__()
        self.momentum_correction = bool(momentum_correction)
        self.verbose = verbose
        self._epoch = 0

    def _optimizer(self):
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is None:
            raise ValueError(f"{type(self).__name__}: the model has no optimizer; compile it first")
        rate = getattr(_inner(optimizer), "_learning_rate", None)
        if isinstance(rate, keras.optimizers.schedules.LearningRateSchedule) or (
                callable(rate) and not isinstance(rate, keras.Variable)):
            raise ValueError(
                f"{type(self).__name__}: the optimizer was built with a learning-rate schedule, so its rate "
                f"cannot be set from a callback. Build it with a float rate, or use the schedule form "
                f"(tfring.schedules.WarmUp / MultiStepDecay / PolynomialDecay) instead of this callback.")
        return optimizer

    def current_learning_rate(self):
        """The optimizer's current rate, as a float.

        Returns:
            A float.
        """
        return float(keras.ops.convert_to_numpy(self._optimizer().learning_rate))

    def set_learning_rate(self, value):
        """Sets the optimizer's rate (with momentum correction when enabled).

        Args:
            value: the new rate (a float).
        """
        optimizer = self._optimizer()
        old = self.current_learning_rate()
        value = float(value)
        if value == old:
            return
        optimizer.learning_rate = value
        if self.momentum_correction and old > 0:
            rescale_momentum(optimizer, value / old)

    def steps_per_epoch(self, given):
        """`given`, else the steps per epoch Keras knows for this fit.

        Args:
            given: the user's steps_per_epoch or None.

        Returns:
            An int.

        Raises:
            ValueError: neither is known (a dataset of unknown length without steps_per_epoch).
        """
        steps = given or (self.params or {}).get("steps")
        if not steps:
            raise ValueError(f"{type(self).__name__}: the number of steps per epoch is unknown (the dataset "
                             f"has no known length); pass steps_per_epoch=")
        return int(steps)

    def epochs_done(self, epoch, batch):
        """Where training is at `batch` of `epoch`, in (fractional) epochs: the callbacks' unit.

        Args:
            epoch: the epoch index.
            batch: the batch index within the epoch.

        Returns:
            A float: epoch + batch / steps per epoch (the steps found at train begin).
        """
        return epoch + batch / self._steps

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["learning_rate"] = self.current_learning_rate()

    def _say(self, message):
        if self.verbose:
            print(f"{type(self).__name__}: {message}", flush=True)
