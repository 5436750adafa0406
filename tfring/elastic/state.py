"""`tfring.elastic.State`: the training state an elastic job commits, and goes on from after a failure.

A state holds variables (a Keras model's and its optimizer's, or a list) and Python values (an
epoch, a step...), which become attributes. `commit()` keeps a copy in memory (what `restore()`
returns to) and, in an elastic job, on every host (`tfring.elastic.commits`). `resume()`, called by
`tfring.elastic.run` before the training function, gives every rank the newest commit any host
holds after a restart, or rank 0's state at the first start.
"""

import contextlib

import numpy as np
import tensorflow as tf

from tfring import runtime
from tfring.elastic import commits
from tfring.ops import collectives, objects
from tfring.strategy import strategy_base
from tfring.strategy.sharding import optimizer_state


class HostsUpdatedInterrupt(RuntimeError):
    """Raised by `State.commit()` on every rank of an elastic job that may grow (the launcher found
    more slots); `tfring.elastic.run` ends the ranks with it, and the launcher starts them again on
    every slot, from that commit.

    Args:
        skip_sync: Horovod's flag: whether the next `sync()` may be skipped (unused here: the ranks
            start again and resume).
    """

    def __init__(self, skip_sync=False):
        super().__init__("the hosts changed: the job starts again on them from this commit")
        self.skip_sync = skip_sync


def _copies(variables):
    return [tf.identity(tf.convert_to_tensor(v)) for v in variables]


def _assign(variables, values, what):
    variables = list(variables)
    if len(variables) != len(values):
        raise ValueError(f"tfring.elastic: the state has {len(variables)} {what} variables but its commit holds "
                         f"{len(values)}: the script must build the same model and optimizer at every start")
    for variable, value in zip(variables, values):
        variable.assign(value)


class State:
    """Training state that an elastic job commits and goes on from (model, optimizer, variables, values).

    Under `tfring run --min-np A --max-np B` a failed rank or a new host starts the job's ranks
    again; `tfring.elastic.run` then gives every rank the newest commit and calls the training
    function again, which goes on from `state`'s values. Outside an elastic job a state only keeps
    its last commit in memory.

    Args:
        model: a built Keras model whose variables (and its optimizer's) the state tracks, or None.
        optimizer: the optimizer (default `model.optimizer`).
        variables: further `tf.Variable`s to track.
        **values: Python values (picklable), which become attributes: `state.epoch`, `state.step`.

    Raises:
        ValueError: the model is not built.

    Example:

    >>> state = tfring.elastic.State(model, epoch=0, step=0)
    >>> state.register_reset_callbacks([lambda: print("now", tfring.size(), "ranks")])
    >>> @tfring.elastic.run
    ... def train(state):
    ...     for state.step in range(state.step, steps):
    ...         train_step(state.step)
    ...         state.commit()
    >>> train(state)
    """

    def __init__(self, model=None, optimizer=None, variables=None, **values):
        if model is not None and not model.built:
            raise ValueError("Model must be built first. Run `model.build(input_shape)`.")
        self.model = model
        self.optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
        self.variables = list(variables or [])
        self._saved_state = dict(values)
        self._reset_callbacks = []
        self._commits = 0  # this job's commits so far (continued from the one resumed)
        self._folder = None  # this host's commit folder, once known (local rank 0 of an elastic job)
        self._in_place = False  # set when the job went on in this process (`reform`): resume from memory
        if commits.elastic_id() is not None:
            runtime.expect_commits()  # (the launcher then lets new slots join at the next commit)
        self._save_variables()
        self._set_attrs()

    # What the state tracks.

    def _parts(self):
        model = list(self.model.variables) if self.model is not None else []
        optimizer = optimizer_state.all_variables(self.optimizer) if self.optimizer is not None else []
        return {"variables": self.variables, "model": model, "optimizer": optimizer}

    def _synced(self):
        """What every rank holds alike: all but a sharded optimizer's slots (each rank's own)."""
        parts = self._parts()
        shared = optimizer_state.shared_variables(self.optimizer) if self.optimizer is not None else []
        return parts["variables"] + parts["model"] + shared

    def _save_variables(self):
        self._saved_variables = {part: _copies(found) for part, found in self._parts().items()}

    def _set_attrs(self):
        for attr, value in self._saved_state.items():
            setattr(self, attr, value)

    # Horovod's methods, which tfring.horovod's state objects keep.

    def register_reset_callbacks(self, callbacks):
        """Adds functions to call after the job's ranks changed (at a restart of an elastic job).

        Args:
            callbacks: functions without arguments; e.g. one that scales the learning rate by
                `tfring.size()`, or re-shards the input.
        """
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        """Runs `reset()`, then the reset callbacks (called by `run` when the ranks changed)."""
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def reset(self):
        """A hook for subclasses, before the reset callbacks; nothing here."""

    def save(self):
        """Keeps a copy of the variables and values in memory (what `restore()` returns to)."""
        self._save_variables()
        self._saved_state = {attr: getattr(self, attr) for attr in self._saved_state}

    def restore(self):
        """Brings the variables and values back to the last `save()`/`commit()`."""
        for part, found in self._parts().items():
            saved = self._saved_variables[part]
            if saved or not found:  # (none saved yet: an optimizer built after the last commit)
                _assign(found, saved, part)
        self._set_attrs()

    def commit(self):
        """Saves the state as the point the job goes on from after a failure, and checks the hosts.

        In an elastic job the commit is also written on every host (by its local rank 0), so it
        survives the ranks being started again. Commit where the values say exactly where training
        is: after a step, with `state.step` already counting it.

        Raises:
            HostsUpdatedInterrupt: the job may grow; `run` lets the ranks start again from here.
        """
        self.save()
        self._commits += 1
        self._persist()
        self.check_host_updates()

    def check_host_updates(self):
        """Raises `HostsUpdatedInterrupt` on every rank when the launcher said an elastic job may grow.

        The ranks agree (one small allreduce in an elastic job), so that all stop at the same commit.
        """
        if commits.elastic_id() is None:
            return
        told = collectives.allreduce(tf.constant([int(runtime.hosts_updated())], tf.int32), op="max")
        if int(np.asarray(told).ravel()[0]):
            raise HostsUpdatedInterrupt()

    def sync(self, root_rank=0):
        """Gives every rank the root's variables and values, and keeps them as the last commit.

        A sharded optimizer's slots (`shard_optimizer_state=True`) stay each rank's own.

        Args:
            root_rank: the rank whose state wins.
        """
        collectives.broadcast_variables(self._synced(), root_rank=root_rank)
        self._save_variables()
        if self._saved_state:
            self._saved_state = self._broadcast_values(self._saved_state, root_rank)
            self._set_attrs()

    def _broadcast_values(self, values, root_rank):
        return objects.broadcast_object(values, root_rank=root_rank, serializer="pickle")

    # Commits that outlive the ranks.

    def _commit_folder(self):
        job = commits.elastic_id()
        if job is None or runtime.local_rank() != 0:
            return None
        if self._folder is None:
            self._folder = commits.folder(job)
        return self._folder

    def _sharded(self):
        return self.optimizer is not None and optimizer_state.sharded(self.optimizer)

    def _persist(self):
        if commits.elastic_id() is None:
            return
        # A sharded optimizer's state is written whole (each slot from its owner: a collective of
        # every rank), so that a job of another size can share it out again.
        whole = self._whole_optimizer_state() if self._sharded() else None
        where = self._commit_folder()
        if where is None:
            return
        arrays = {part: [np.asarray(v) for v in found] for part, found in self._saved_variables.items()}
        if whole is not None:
            arrays["optimizer"] = whole
        commits.write(where, self._commits, arrays, self._saved_state)

    def _whole_optimizer_state(self):
        store = {}
        self.optimizer.save_own_variables(store)  # (patched under sharding: every slot whole)
        return [np.asarray(store[str(i)]) for i in range(len(store))]

    def _share_optimizer_state(self, found, root):
        """Gives a sharded optimizer the root's commit of its whole state: each rank keeps its own slots."""
        mine = runtime.rank() == root
        arrays = found["arrays"]["optimizer"] if mine else None
        layout = objects.broadcast_object([(a.shape, a.dtype.str) for a in arrays] if mine else None,
                                          root_rank=root, serializer="pickle")
        values = [tf.constant(a) for a in arrays] if mine else [tf.zeros(shape, np.dtype(d)) for shape, d in layout]
        whole = collectives.broadcast(values, root_rank=root)
        if len(whole) != len(self.optimizer.variables):
            raise ValueError(f"tfring.elastic: the optimizer has {len(self.optimizer.variables)} variables but its "
                             f"commit holds {len(whole)}: the script must build the same optimizer at every start")
        self.optimizer.load_own_variables({str(i): np.asarray(v) for i, v in enumerate(whole)})

    def resume(self):
        """Gives every rank the state to start from: after a restart of an elastic job the newest
        commit any host holds (then the reset callbacks run), else rank 0's state.

        Returns:
            True when a commit was resumed.

        Raises:
            ValueError: a commit does not match the state (another model), or cannot be read.
        """
        restarted = commits.elastic_id() is not None and commits.restart() > 0
        found = self._memory_commit() if self._in_place else self._read_commit() if restarted else None
        heard = [-1 if found is None else found["number"], int(bool(found and found["arrays"]["optimizer"]))]
        numbers = np.asarray(collectives.allgather(tf.constant([heard], tf.int64))) if restarted else np.array([heard])
        newest = int(numbers[:, 0].max())
        root = int(np.argmax(numbers[:, 0])) if newest >= 0 else 0
        if newest >= 0 and numbers[root, 1]:
            self._build_optimizer()  # (on every rank: the broadcast below carries its slots)
        if newest >= 0 and runtime.rank() == root:
            self._load(found)
        if newest >= 0 and numbers[root, 1] and self._sharded():
            self._share_optimizer_state(found, root)
        self._commits = max(newest, 0)
        self.sync(root)
        if restarted:
            self.on_reset()
        return newest >= 0

    def forget(self):
        """Removes this host's copy of the commits (the job's training has finished); called by `run`."""
        if self._folder is not None:
            commits.remove(self._folder)
            self._folder = None

    def _memory_commit(self):
        """The last commit this process holds (its start, before any: what it trained from)."""
        return {"number": self._commits, "in_memory": True, "arrays": {"optimizer": self._saved_variables["optimizer"]}}

    def _read_commit(self):
        where = self._commit_folder()
        return commits.read(where) if where is not None else None

    def _load(self, found):
        if found.get("in_memory"):
            self.restore()
            return
        for part, variables in self._parts().items():
            if not (part == "optimizer" and self._sharded()):  # (`_share_optimizer_state`)
                _assign(variables, found["arrays"][part], part)
        self._saved_state = found["values"]
        self._set_attrs()  # (`sync` then copies the variables as the last commit)

    def _build_optimizer(self):
        """Builds a Keras optimizer that has not applied a step yet, so its slots can take the commit's.

        Only the ranks whose optimizer is unbuilt build it (all at a restart; a rank that joins a
        running job alone), so its slots are made without the strategy's broadcast at creation:
        `sync` then gives them the commit's values."""
        optimizer = self.optimizer
        if optimizer is None or getattr(optimizer, "built", True):
            return
        strategy = getattr(self.model, "distribute_strategy", None)
        extended = getattr(strategy, "extended", None)
        own = (strategy_base.while_traced(extended, "rank_own_variables", True)
               if hasattr(extended, "rank_own_variables") else contextlib.nullcontext())
        with strategy.scope() if strategy is not None else contextlib.nullcontext(), own:
            optimizer.build(self.model.trainable_variables if self.model is not None else self.variables)
