"""Gradual (or constant) learning-rate warm-up per batch, with Horovod's semantics."""

import warnings

from tfring import checks
from tfring import runtime
from tfring.callbacks.learning_rate_callback import LearningRateCallback
from tfring.schedules import warm_up


class LearningRateWarmup(LearningRateCallback):
    """Warms the learning rate up over the first `warmup_epochs` (Goyal et al. 2017).

    Horovod's `LearningRateWarmupCallback`, with its argument names, order and meaning:
    `initial_lr` is the rate warm-up ends at (the rate for the global batch, e.g. from
    `tfring.scale_learning_rate`; by default the optimizer's rate when training starts). Warm-up
    starts from `initial_lr / number of ranks` (the single-process rate) and rises linearly per
    batch to `initial_lr` at the end of epoch `warmup_epochs`. The rate is then set to `initial_lr`
    once and left alone, so a decay callback placed after this one takes over. When the start
    equals the end (one process, no `start_lr`) there is nothing to warm up: a warning says so.

    Args:
        initial_lr: the rate at the end of warm-up (Horovod's meaning). Default: the optimizer's
            rate at train begin.
        warmup_epochs: epochs of warm-up (may be fractional), >= 0.
        momentum_correction: scale momentum buffers by new/old rate at each change.
        steps_per_epoch: batches per epoch; default: what `fit` knows.
        verbose: 1 prints when warm-up ends.
        start_lr: (keyword only) the rate at the first batch. Default: `initial_lr / tfring.size()`.
        mode: (keyword only) "gradual" (linear ramp) or "constant" (hold `start_lr`, then jump).

    Example:

    >>> lr = tfring.scale_learning_rate(0.1, global_batch_size=64 * tfring.size())
    >>> model.compile(optimizer=keras.optimizers.SGD(lr, momentum=0.9), loss="mse")
    >>> model.fit(ds, epochs=90, callbacks=[
    ...     tfring.callbacks.LearningRateWarmup(initial_lr=lr, warmup_epochs=5),
    ...     tfring.callbacks.MultiStepDecay(milestones=[30, 60, 80], factor=0.1)])
    """

    def __init__(self, initial_lr=None, warmup_epochs=5, momentum_correction=True, steps_per_epoch=None,
                 verbose=0, *, start_lr=None, mode="gradual"):
        super().__init__(momentum_correction=momentum_correction, verbose=verbose)
        self.warmup_epochs = checks.number("LearningRateWarmup", "warmup_epochs", warmup_epochs, at_least=0,
                                           unit="epochs")
        for what, value in (("initial_lr", initial_lr), ("start_lr", start_lr)):
            if value is not None:
                checks.number("LearningRateWarmup", what, value, at_least=0, expected="a number >= 0")
        self.mode = checks.choice("LearningRateWarmup", "mode", mode, warm_up.MODES)
        if steps_per_epoch is not None:
            checks.number("LearningRateWarmup", "steps_per_epoch", steps_per_epoch, integer=True, above=0,
                          expected="a positive int")
        self.initial_lr = initial_lr
        self.start_lr = start_lr
        self.given_steps_per_epoch = steps_per_epoch
        self._done = False
        self._warned = False

    def on_train_begin(self, logs=None):
        epochs = (self.params or {}).get("epochs")
        if epochs is not None and self.warmup_epochs > epochs:
            raise ValueError(f"LearningRateWarmup: the warm-up ({self.warmup_epochs:g} epochs) is longer than "
                             f"the training ({epochs} epochs)")
        self._steps = self.steps_per_epoch(self.given_steps_per_epoch)
        self._target = float(self.initial_lr) if self.initial_lr is not None else self.current_learning_rate()
        size = runtime.size() if runtime.is_initialized() else 1
        self._initial = float(self.start_lr) if self.start_lr is not None else self._target / size
        self._done = False
        if self._initial == self._target and self.warmup_epochs > 0 and not self._warned:
            self._warned = True
            why = f"{size} rank(s)" + (", start_lr not given" if self.start_lr is None else ", start_lr equal")
            warnings.warn(f"LearningRateWarmup: warm-up starts and ends at {self._target:g} ({why}), so it changes "
                          f"nothing. Horovod's meaning applies: initial_lr is the rate after warm-up, which starts "
                          f"from initial_lr / ranks.", stacklevel=2)

    def learning_rate_at(self, epoch, batch):
        """The rate this callback sets at `batch` of `epoch` (None: after warm-up, not its business).

        Args:
            epoch: the epoch index.
            batch: the batch index within the epoch.

        Returns:
            A float, or None.
        """
        progress = self.epochs_done(epoch, batch)
        if progress >= self.warmup_epochs:
            return None
        return warm_up.warm_up_rate(progress, self.warmup_epochs, self._initial, self._target, self.mode)

    def on_train_batch_begin(self, batch, logs=None):
        rate = self.learning_rate_at(self._epoch, batch)
        if rate is not None:
            self.set_learning_rate(rate)
        elif not self._done:
            self._done = True
            self.set_learning_rate(self._target)
            self._say(f"warm-up done at epoch {self._epoch}, batch {batch}: learning rate {self._target:g}")
