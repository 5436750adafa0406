"""Horovod's elastic API (`hvd.elastic`): state objects, their Keras callbacks, and `run`, on `tfring.elastic`.

The state objects are `tfring.elastic.State`s with Horovod's constructors: `sync()` gives every
rank rank 0's values (model and optimizer variables, and any keyword attributes), `commit()` keeps
a copy, `restore()` brings the last copy back, undoing what changed since.

Under `tfring run --min-np A --max-np B`, a failed rank, a lost host or new slots start the job's
ranks again on the hosts there (tfring's elastic jobs restart every rank, as torchrun's do), and
`run(func)` calls `func` again from the newest commit, which every host keeps, after running the
state's reset callbacks: Horovod's rollback to the last commit on a lost worker, and its reset on
added hosts, which `commit()` signals with `HostsUpdatedInterrupt` on every rank at once. A failed
collective does not raise `HorovodInternalError`: the ranks start anew and resume. Scripts written
for Horovod's elastic mode run with the import line changed.
"""

import keras
import tensorflow as tf

from tfring import elastic
from tfring import runtime
from tfring.horovod import broadcasts


class HorovodInternalError(RuntimeError):
    """Horovod's error for a failed collective, for scripts that catch it (tfring raises its own errors)."""


HostsUpdatedInterrupt = elastic.HostsUpdatedInterrupt  # (raised by commit() when the job may grow)


class ObjectState(elastic.State):
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
        self._bcast_object = bcast_object
        self._rank = get_rank or runtime.rank
        super().__init__(**kwargs)

    def _broadcast_values(self, values, root_rank):
        if self._bcast_object is not None and root_rank == 0:
            return self._bcast_object(values)
        return broadcasts.broadcast_object(values, root_rank=root_rank)


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
        super().__init__(variables=variables, **kwargs)


class TensorFlowKerasState(ObjectState):
    """A Keras model and optimizer (and attributes) kept in step (Horovod's `TensorFlowKerasState`/`KerasState`).

    A sharded optimizer's slots (`shard_optimizer_state=True`) stay each rank's own in `sync()`:
    a rank holds only those of the variables it owns.

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
        super().__init__(model=model, optimizer=optimizer, **kwargs)


KerasState = TensorFlowKerasState


def run(func):
    """Runs `func(state, ...)` from the state to go on from (Horovod's `hvd.elastic.run` decorator).

    At the job's first start every rank gets rank 0's state; when an elastic job's ranks were
    started again (a lost rank or host, or added hosts), the newest commit, after which the
    state's reset callbacks run (`tfring.elastic.run`).

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
    return elastic.run(func)


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
