"""Horovod's Keras callbacks (`hvd.callbacks.*`) for Keras 3, with Horovod's arguments and formulas."""

import keras
import numpy as np
import tensorflow as tf

from tfring import runtime
from tfring.callbacks.learning_rate_callback import LearningRateCallback
from tfring.horovod import broadcasts
from tfring.horovod import collectives
from tfring.strategy.sharding import optimizer_state


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """Gives every rank the root's weights and optimizer state when training begins.

    Horovod broadcasts after the first batch (its optimizers made their variables then); Keras 3
    builds them before the first step, so this broadcasts before it: every rank's first step
    already starts from the root's weights. A model Keras builds in its first step (a
    `Sequential` without an `Input`, a subclassed model not yet called) has no weights when
    training begins: it gets the root's weights and optimizer state after the first batch, as
    under Horovod, so that one step is averaged over the ranks' own initial weights.

    Args:
        root_rank: the rank whose values win.
        device: ignored.
        local_variables: a variable or list of variables not to broadcast.

    Example:

    >>> model.fit(x, y, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    """

    def __init__(self, root_rank, device="", local_variables=None):
        super().__init__()
        self.root_rank = root_rank
        self.broadcast_done = False
        if local_variables is None:
            local_variables = []
        elif not isinstance(local_variables, (list, tuple)):
            local_variables = [local_variables]
        self._local = {id(v) for v in local_variables}

    def register_local_var(self, var):
        """Leaves `var` out of the broadcast."""
        self._local.add(id(var))

    def _broadcast(self):
        if self.broadcast_done or not self.model.built:  # built in its first step: after it
            return
        optimizer = self.model.optimizer
        if optimizer is not None and not optimizer.built:
            optimizer.build(self.model.trainable_variables)
        # model.weights, not model.variables: those include the seed generators' states, and equal
        # seeds would give every rank the same dropout masks (neither Horovod nor one process does).
        variables = [v for v in self.model.weights if id(v) not in self._local]
        # (a sharded optimizer's slots differ between ranks by design: each rank keeps its own)
        variables += optimizer_state.shared_variables(optimizer) if optimizer is not None else []
        broadcasts.broadcast_variables(variables, self.root_rank)
        self.broadcast_done = True

    def on_train_begin(self, logs=None):
        self._broadcast()

    def on_batch_end(self, batch, logs=None):
        self._broadcast()  # a model trained without fit's train-begin (train_on_batch loops)


class MetricAverageCallback(keras.callbacks.Callback):
    """Averages every metric in the epoch's logs over the ranks (Horovod's `MetricAverageCallback`).

    Place it before the callbacks that read the logs (ReduceLROnPlateau, TensorBoard,
    ModelCheckpoint).

    Args:
        device: ignored.
    """

    def __init__(self, device=""):
        super().__init__()

    def on_epoch_end(self, epoch, logs=None):
        if not logs:
            return
        names = sorted(logs)  # every rank in the same order
        values = [tf.constant(np.asarray(logs[k], np.float64)) for k in names]
        averaged = collectives.grouped_allreduce(values)
        for name, value in zip(names, averaged):
            value = value.numpy()
            logs[name] = float(value) if value.ndim == 0 else value


class LearningRateScheduleCallback(LearningRateCallback):
    """Sets the rate to `initial_lr * multiplier(epoch)` from `start_epoch` to `end_epoch` (Horovod's).

    Args:
        initial_lr: the rate `multiplier` scales (required, as in Horovod).
        multiplier: a number (then `multiplier ** (epoch - start_epoch)`) or `f(epoch)`.
        start_epoch: the first epoch it acts on.
        end_epoch: the epoch it stops before (None: never stops).
        staircase: True sets the rate at the start of each epoch with a whole epoch; False at each
            batch with `epoch + batch / steps_per_epoch`.
        momentum_correction: scale momentum buffers by new rate / old rate at each change.
        steps_per_epoch: batches per epoch; default: what `fit` knows.

    Example:

    >>> hvd.callbacks.LearningRateScheduleCallback(0.1 * hvd.size(), multiplier=0.1, start_epoch=30)
    """

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None):
        super().__init__(momentum_correction=momentum_correction)
        if initial_lr is None:
            raise ValueError("Parameter `initial_lr` is required")
        self.initial_lr, self.start_epoch, self.end_epoch = float(initial_lr), start_epoch, end_epoch
        self.staircase, self.given_steps_per_epoch = staircase, steps_per_epoch
        self.multiplier = multiplier if callable(multiplier) else (lambda epoch: multiplier ** (epoch - start_epoch))

    def on_train_begin(self, logs=None):
        self._steps = None if self.staircase else self.steps_per_epoch(self.given_steps_per_epoch)

    def _epoch_at(self, batch):
        return self._epoch if self.staircase else self._epoch + float(batch) / self._steps

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if logs is not None:
            logs["lr"] = logs["learning_rate"]  # Horovod's key (tfring's callbacks log "learning_rate")

    def on_train_batch_begin(self, batch, logs=None):
        outside = self._epoch < self.start_epoch or (self.end_epoch is not None and self._epoch >= self.end_epoch)
        if outside or (self.staircase and batch != 0):
            return
        self.set_learning_rate(self.initial_lr * self.multiplier(self._epoch_at(batch)))


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Horovod's gradual warm-up: from `initial_lr / size` to `initial_lr` over `warmup_epochs`, per batch.

    The rate at batch b of epoch e is `initial_lr / size * ((e + (b + 1) / steps) * (size - 1) /
    warmup_epochs + 1)`, Horovod's formula (`tfring.callbacks.LearningRateWarmup` is the RingStrategy
    form).

    Args:
        initial_lr: the rate warm-up ends at.
        warmup_epochs: epochs of warm-up.
        momentum_correction: scale momentum buffers by new rate / old rate at each change.
        steps_per_epoch: batches per epoch; default: what `fit` knows.
        verbose: 1: rank 0 prints when warm-up ends.

    Example:

    >>> hvd.callbacks.LearningRateWarmupCallback(initial_lr=0.1 * hvd.size(), warmup_epochs=5)
    """

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True, steps_per_epoch=None, verbose=0):
        super().__init__(initial_lr, self._multiplier, start_epoch=0, end_epoch=warmup_epochs, staircase=False,
                         momentum_correction=momentum_correction, steps_per_epoch=steps_per_epoch)
        self.warmup_epochs, self.verbose = warmup_epochs, verbose

    def _multiplier(self, epoch):
        size = runtime.size()
        epoch += 1.0 / self._steps
        return 1.0 / size * (epoch * (size - 1) / self.warmup_epochs + 1)

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.end_epoch - 1 and self.verbose > 0 and runtime.rank() == 0:
            print(f"\nEpoch {epoch + 1}: finished gradual learning rate warmup to {self.current_learning_rate():g}.")


class BestModelCheckpoint(keras.callbacks.ModelCheckpoint):
    """Keeps the best model so far, written by rank 0 only (Horovod's `BestModelCheckpoint`).

    Horovod's arguments, in its order; Horovod leaves the path to its Spark estimators, Keras 3
    needs one at construction: `filepath` (keyword only) defaults to "best.keras", or
    "best.weights.h5" with `save_weights_only`.

    Args:
        monitor: the metric to compare.
        verbose: Keras' verbosity.
        save_weights_only: save the weights only.
        mode: "auto", "min" or "max".
        save_freq: "epoch" or a number of batches.
        filepath: where to save.

    Example:

    >>> hvd.callbacks.BestModelCheckpoint(monitor="val_loss", filepath="best.keras")
    """

    def __init__(self, monitor="val_loss", verbose=0, save_weights_only=False, mode="auto", save_freq="epoch", *,
                 filepath=None):
        filepath = filepath or ("best.weights.h5" if save_weights_only else "best.keras")
        super().__init__(filepath=filepath, monitor=monitor, verbose=verbose, save_best_only=True,
                         save_weights_only=save_weights_only, mode=mode, save_freq=save_freq)

    def on_train_batch_end(self, batch, logs=None):
        if runtime.rank() == 0:
            super().on_train_batch_end(batch, logs)

    def on_epoch_end(self, epoch, logs=None):
        if runtime.rank() == 0:
            super().on_epoch_end(epoch, logs)
