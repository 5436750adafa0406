"""Polynomial decay per batch, from a start epoch to an end epoch (the TPU LARS recipe)."""

from tfring import checks
from tfring.callbacks.learning_rate_callback import LearningRateCallback
from tfring.schedules import polynomial_decay


class PolynomialDecay(LearningRateCallback):
    """Decays the rate per batch: lr = (base − end_lr) · (1 − t)^power + end_lr, with t the
    fraction of the way from `start_epoch` to `end_epoch`; before `start_epoch` (e.g. during
    warm-up) it does nothing.

    Args:
        end_epoch: the epoch at which the rate reaches `end_lr`, > start_epoch.
        power: the polynomial's power, > 0. Defaults to 2 (the TPU ResNet LARS schedule).
        end_lr: the final rate, >= 0. Defaults to 0.
        start_epoch: where decay starts (put it at the end of warm-up), >= 0.
        initial_lr: the base rate. Default: the optimizer's rate at train begin.
        steps_per_epoch: batches per epoch; default: what `fit` knows.
        momentum_correction: scale momentum buffers by new/old rate at each change.
        verbose: 1 prints when decay starts.

    Example:

    >>> callbacks = [tfring.callbacks.LearningRateWarmup(warmup_epochs=5),
    ...              tfring.callbacks.PolynomialDecay(end_epoch=90, start_epoch=5, power=2)]
    """

    def __init__(self, end_epoch, power=2.0, end_lr=0.0, start_epoch=0, initial_lr=None, steps_per_epoch=None,
                 momentum_correction=True, verbose=0):
        super().__init__(momentum_correction=momentum_correction, verbose=verbose)
        self.start_epoch = checks.number("PolynomialDecay", "start_epoch", start_epoch, at_least=0, unit="epochs")
        self.end_epoch = checks.number("PolynomialDecay", "end_epoch", end_epoch, above=0, unit="epochs")
        if self.end_epoch <= self.start_epoch:
            raise ValueError(f"PolynomialDecay: end_epoch ({end_epoch}) must be after start_epoch ({start_epoch})")
        self.power = checks.number("PolynomialDecay", "power", power, above=0, expected="a number > 0")
        for what, value in (("end_lr", end_lr), ("initial_lr", initial_lr)):
            if value is not None:
                checks.number("PolynomialDecay", what, value, at_least=0, expected="a number >= 0")
        self.end_lr = float(end_lr)
        self.initial_lr = initial_lr
        self.given_steps_per_epoch = steps_per_epoch

    def on_train_begin(self, logs=None):
        self._base = float(self.initial_lr) if self.initial_lr is not None else self.current_learning_rate()
        self._steps = self.steps_per_epoch(self.given_steps_per_epoch)

    def learning_rate_at(self, epoch, batch):
        """The rate at `batch` of `epoch`, or None before `start_epoch`.

        Args:
            epoch: the epoch index.
            batch: the batch index within the epoch.

        Returns:
            A float, or None.
        """
        progress = self.epochs_done(epoch, batch)
        if progress < self.start_epoch:
            return None
        return polynomial_decay.polynomial_decay_rate(progress - self.start_epoch, self.end_epoch - self.start_epoch,
                                                      self._base, self.end_lr, self.power)

    def on_train_batch_begin(self, batch, logs=None):
        rate = self.learning_rate_at(self._epoch, batch)
        if rate is not None:
            self.set_learning_rate(rate)
