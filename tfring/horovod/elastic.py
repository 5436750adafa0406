"""Horovod's elastic API (`hvd.elastic`): state objects, their Keras callbacks, and `run`.

The state objects work as Horovod's: `sync()` gives every rank rank 0's values (model and
optimizer variables, and any keyword attributes), `commit()` keeps a copy in host memory,
`restore()` brings the last copy back, undoing what changed since.

What tfring does not do (yet) is change the job's ranks while it runs: a tfring job keeps the
ranks it started with, and a rank that fails ends the job with the error naming it (the ring cannot
heal). So `run(func)` syncs the state and calls `func` once: there is never a reset to retry
after, and `commit()` never raises `HostsUpdatedInterrupt`. Scripts written for Horovod's
elastic mode run unchanged on a fixed set of ranks.
"""

import functools

import keras
import tensorflow as tf

from tfring import runtime
from tfring.horovod import broadcasts
from tfring.strategy.sharding import optimizer_state


class HorovodInternalError(RuntimeError):
    """Horovod's error for a failed collective, for scripts that catch it (tfring raises its own errors)."""


class HostsUpdatedInterrupt(RuntimeError):
    """Horovod's interrupt for hosts added or removed; tfring's jobs keep their ranks, so it is never raised.

    Args:
        skip_sync: Horovod's flag: whether the next `sync()` may be skipped.
    """

    def __init__(self, skip_sync=False):
        super().__init__()
        self.skip_sync = skip_sync


class ObjectState:
    """Python values kept in step across the ranks (Horovod's `hvd.elastic.ObjectState`).

    Args:
        bcast_object: broadcasts a Python object from rank 0 (default `hvd.broadcast_object`).
        get_rank: returns this rank (default `hvd.rank`).
        **kwargs: the values, which become attributes.

    Example:

    >>> state = hvd.elastic.ObjectState(epoch=0, batch=0)
    >>> state.sync()
    """

    def __init__(self, bcast_object=None, get_rank=None, **kwargs):
        self._bcast_object = bcast_object or broadcasts.broadcast_object
        self._rank = get_rank or runtime.rank
        self._saved_state = kwargs
        self._reset_callbacks = []
        self._set_attrs()

    def register_reset_callbacks(self, callbacks):
        """Keeps `callbacks` to run after a reset (tfring's jobs never reset: see the module docstring)."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        """Runs `reset()` and the reset callbacks."""
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def commit(self):
        """Keeps a copy of the state in host memory (`save()`), as the point `restore()` returns to."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Horovod raises `HostsUpdatedInterrupt` here when hosts changed; a tfring job's never do."""

    def save(self):
        """Keeps a copy of the attributes."""
        self._saved_state = {attr: getattr(self, attr) for attr in self._saved_state}

    def restore(self):
        """Brings the attributes back to the last `save()`/`commit()`."""
        self._set_attrs()

    def sync(self):
        """Gives every rank rank 0's attributes."""
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def reset(self):
        """Horovod's hook before a re-sync after a reset; nothing here."""

    def _set_attrs(self):
        for attr, value in self._saved_state.items():
            setattr(self, attr, value)


def _values(variables):
    return [tf.identity(tf.convert_to_tensor(v)) for v in variables]


def _assign(variables, values):
    for variable, value in zip(variables, values):
        variable.assign(value)


def _optimizer_variables(optimizer):
    if optimizer is None:
        return []
    found = optimizer.variables
    return list(found() if callable(found) else found)  # a method on TF1 and Keras 2 optimizers


class TensorFlowState(ObjectState):
    """A list of TensorFlow variables (and attributes) kept in step (Horovod's `hvd.elastic.TensorFlowState`).

    Eager TensorFlow only, as Horovod's on TF2.

    Args:
        variables: the `tf.Variable`s to track.
        session: ignored (TF1 sessions: not supported here).
        **kwargs: values that become attributes.

    Example:

    >>> state = hvd.elastic.TensorFlowState([w, b], epoch=0)
    >>> state.sync()
    """

    def __init__(self, variables=None, session=None, **kwargs):
        if not tf.executing_eagerly():
            raise NotImplementedError("hvd.elastic.TensorFlowState: eager TensorFlow only (as Horovod's on TF2)")
        self.variables = list(variables or [])
        self._values = _values(self.variables)
        super().__init__(**kwargs)

    def save(self):
        """Keeps a copy of the variables and attributes."""
        self._values = _values(self.variables)
        super().save()

    def restore(self):
        """Brings the variables and attributes back to the last commit."""
        _assign(self.variables, self._values)
        super().restore()

    def sync(self):
        """Gives every rank rank 0's variables and attributes, and keeps them as the last commit."""
        broadcasts.broadcast_variables(self.variables, root_rank=0)
        self._values = _values(self.variables)
        super().sync()


class TensorFlowKerasState(ObjectState):
    """A Keras model and optimizer (and attributes) kept in step (Horovod's `TensorFlowKerasState`/`KerasState`).

    Args:
        model: a built Keras model.
        optimizer: its optimizer (default `model.optimizer`).
        backend: ignored.
        **kwargs: values that become attributes.

    Raises:
        ValueError: the model is not built.

    Example:

    >>> state = hvd.elastic.KerasState(model, batch=0, epoch=0)
    >>> state.sync()
    """

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        if not model.built:
            raise ValueError("Model must be built first. Run `model.build(input_shape)`.")
        self.model = model
        self.optimizer = optimizer or getattr(model, "optimizer", None)
        self._save_model()
        super().__init__(**kwargs)

    def _variables(self):
        return list(self.model.variables) + _optimizer_variables(self.optimizer)

    def _save_model(self):
        self._saved_variables = _values(self._variables())

    def save(self):
        """Keeps a copy of the model's and optimizer's variables and the attributes."""
        self._save_model()
        super().save()

    def restore(self):
        """Brings the variables and attributes back to the last commit."""
        _assign(self._variables(), self._saved_variables)
        super().restore()

    def sync(self):
        """Gives every rank rank 0's variables and attributes, and keeps them as the last commit.

        A sharded optimizer's slots (`shard_optimizer_state=True`) stay each rank's own: a rank
        holds only those of the variables it owns."""
        shared = optimizer_state.shared_variables(self.optimizer) if self.optimizer is not None else []
        broadcasts.broadcast_variables(list(self.model.variables) + shared, root_rank=0)
        self._save_model()
        super().sync()


KerasState = TensorFlowKerasState


def run(func):
    """Runs `func(state, ...)` after `state.sync()` (Horovod's `hvd.elastic.run` decorator).

    A tfring job keeps its ranks, so `func` runs once: a failing rank ends the job with the
    error naming it, as in any tfring job (see the module docstring).

    Args:
        func: a function whose first argument is a state object.

    Returns:
        The wrapped function.

    Example:

    >>> @hvd.elastic.run
    ... def train(state):
    ...     model.fit(dataset, initial_epoch=state.epoch, epochs=10, callbacks=[...])
    >>> train(hvd.elastic.KerasState(model, epoch=0))
    """

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        state.sync()
        return func(state, *args, **kwargs)

    return wrapper


class _StateCallback(keras.callbacks.Callback):
    def __init__(self, state):
        super().__init__()
        self.state = state


class CommitStateCallback(_StateCallback):
    """Commits `state` every `batches_per_commit` batches and at each epoch's end (Horovod's Keras callback).

    Args:
        state: a state object.
        batches_per_commit: batches between commits.

    Example:

    >>> model.fit(x, y, callbacks=[hvd.elastic.CommitStateCallback(state, batches_per_commit=10)])
    """

    def __init__(self, state, batches_per_commit=1):
        super().__init__(state)
        self.batches_per_commit = batches_per_commit
        self.batches_remaining = batches_per_commit

    def on_train_begin(self, logs=None):
        self.batches_remaining = self.batches_per_commit

    def on_batch_end(self, batch, logs=None):
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self.state.commit()
            self.batches_remaining = self.batches_per_commit

    def on_epoch_end(self, epoch, logs=None):
        self.state.commit()


class UpdateBatchStateCallback(_StateCallback):
    """Keeps `state.batch` at the batch just finished, back to 0 after each epoch (Horovod's callback).

    Args:
        state: a state object with a `batch` attribute.
    """

    def on_batch_end(self, batch, logs=None):
        self.state.batch = batch

    def on_epoch_end(self, epoch, logs=None):
        self.state.batch = 0


class UpdateEpochStateCallback(_StateCallback):
    """Counts finished epochs in `state.epoch` from its value when `fit` began (Horovod's callback).

    Args:
        state: a state object with an `epoch` attribute.
    """

    def __init__(self, state):
        super().__init__(state)
        self.initial_epoch = state.epoch

    def on_train_begin(self, logs=None):
        self.initial_epoch = self.state.epoch

    def on_epoch_end(self, epoch, logs=None):
        self.state.epoch = self.initial_epoch + epoch + 1
