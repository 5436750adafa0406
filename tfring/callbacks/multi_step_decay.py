"""Step decay at chosen epochs (×factor at each milestone), as in the ResNet-50 recipe."""

from tfring import checks
from tfring.callbacks.learning_rate_callback import LearningRateCallback
from tfring.schedules import multi_step_decay


class MultiStepDecay(LearningRateCallback):
    """Multiplies the base rate by `factor` at each milestone epoch.

    At the start of each epoch e the rate becomes base · factor^(number of milestones ≤ e) (set
    only when that changes, so a warm-up callback keeps the rate until its end; put milestones
    after the warm-up). The
    base is the optimizer's rate when training starts (before any warm-up changes it), or
    `initial_lr`. Pass `initial_lr` when resuming a run (`BackupAndRestore`, `initial_epoch`):
    the optimizer's saved rate is then already decayed.

    Args:
        milestones: strictly increasing epochs. Defaults to [30, 60, 80].
        factor: the multiplier at each milestone, > 0. Defaults to 0.1.
        initial_lr: the base rate. Default: the optimizer's rate at train begin.
        momentum_correction: scale momentum buffers by new/old rate at each change.
        verbose: 1 prints each change.

    Example:

    >>> model.fit(ds, epochs=90, callbacks=[
    ...     tfring.callbacks.LearningRateWarmup(warmup_epochs=5),
    ...     tfring.callbacks.MultiStepDecay(milestones=[30, 60, 80], factor=0.1)])
    """

    def __init__(self, milestones=(30, 60, 80), factor=0.1, initial_lr=None, momentum_correction=True, verbose=0):
        super().__init__(momentum_correction=momentum_correction, verbose=verbose)
        self.milestones = multi_step_decay.check_milestones("MultiStepDecay", milestones)
        self.factor = checks.number("MultiStepDecay", "factor", factor, above=0, expected="a number > 0")
        if initial_lr is not None:
            checks.number("MultiStepDecay", "initial_lr", initial_lr, at_least=0, expected="a number >= 0")
        self.initial_lr = initial_lr

    def on_train_begin(self, logs=None):
        self._base = float(self.initial_lr) if self.initial_lr is not None else self.current_learning_rate()
        self._last = None

    def learning_rate_at(self, epoch):
        """The rate for `epoch`.

        Args:
            epoch: the epoch index.

        Returns:
            A float.
        """
        return multi_step_decay.multi_step_rate(epoch, self._base, self.milestones, self.factor)

    def on_epoch_begin(self, epoch, logs=None):
        super().on_epoch_begin(epoch, logs)
        rate = self.learning_rate_at(epoch)
        # Set the rate only when it changes (a milestone, or a resumed run that starts past one),
        # so that a warm-up callback owns the rate until its end.
        first = self._last is None
        if (first and (rate != self._base or self.initial_lr is not None)) or (not first and rate != self._last):
            self._say(f"epoch {epoch}: learning rate {rate:g}")
            self.set_learning_rate(rate)
        self._last = rate
