"""Checkpoint writes under RingStrategy: every rank runs Keras' saving code, rank 0 keeps the file.

Every rank must take part in a save, because saving can read sync-on-read state (metrics), and
that read is a collective. So `model.save`, `model.save_weights`, `ModelCheckpoint` and
`BackupAndRestore` still run Keras' saving code on every rank, each into a file in memory
(`save_sinks`: ranks > 0 write nothing to any disk, and HDF5 never meets a full one). Rank 0 then
writes its bytes under a partial name beside the target and renames it when complete (a reader
never sees half a file: `partial_files`). The ranks end a save by agreeing on its outcome: when it failed on any
rank (a full disk on rank 0), every rank raises, with the same message naming the user's path;
when it returns, the file exists for every rank.

`keras_wraps.install` wraps those Keras methods once; models that do not belong to a multi-rank
RingStrategy are saved exactly as before.
"""

import contextlib
import functools
import inspect
import json
import os

from keras.src.utils import file_utils

from tfring import file_safety
from tfring.strategy import keras_patches
from tfring.strategy.keras_wraps import partial_files
from tfring.strategy.keras_wraps import save_sinks
from tfring.strategy.strategy_base import ring_strategy_of


# The name of the barrier every save starts with: a rank that saves while another trains then
# fails naming it, and `explain_save_mismatch` turns that into advice.
SAVE_MARKER = "tfring_model_saving"


def _barrier(label=""):
    from tfring.ops import collectives

    collectives.barrier(label=label)


def explain_save_mismatch(error):
    """A clear error for a collective that failed because some ranks were saving and others not.

    Horovod scripts save on rank 0 only (`if hvd.rank() == 0: model.save(...)`, a ModelCheckpoint
    in rank 0's callbacks only); under RingStrategy every rank must run the save. Only a mismatch
    (ranks reaching different collectives, one of them a save's barrier) is explained; a rank that
    died during a save keeps its own error.

    Args:
        error: the exception a collective raised.

    Returns:
        A `RuntimeError` to raise instead, or None when `error` is not about a save.

    Example:

    >>> try:
    ...     model.fit(ds)
    ... except tf.errors.FailedPreconditionError as e:
    ...     raise explain_save_mismatch(e) or e
    """
    text = str(error)
    if SAVE_MARKER not in text or "ranks passed different inputs" not in text or isinstance(error, RuntimeError):
        return None  # not a mismatch at a save's barrier (a RuntimeError here is our own, explained)
    return RuntimeError(
        "tfring: a model save (model.save, save_weights, ModelCheckpoint or BackupAndRestore) ran on some "
        "ranks only. Under RingStrategy every rank must run the save (tfring writes the file once, from "
        "rank 0): call it on every rank and give ModelCheckpoint to fit on every rank, without "
        f"`if rank == 0`. ({_first_line(error)})")


def _first_line(error):
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


@contextlib.contextmanager
def save_mismatch_explained():
    """Runs its body, raising `explain_save_mismatch`'s clear error instead of a save mismatch.

    Example:

    >>> with save_mismatch_explained():
    ...     model.fit(ds)
    """
    try:
        yield
    except Exception as e:
        clear = explain_save_mismatch(e)
        if clear is None:
            raise
        raise clear from e


def _save_started():
    with save_mismatch_explained():
        _barrier(label=SAVE_MARKER)


def _is_local(path):
    return "://" not in str(path)


def _name_for_keras(path):
    # What Keras reads the extension from and names in its errors. A path Keras takes for remote
    # (`/gcs/...`) would make it copy through `$TMPDIR`: it gets the file's name only.
    return os.path.basename(path) if file_utils.is_remote_path(path) else path


def _outcome(error):
    if error is None:
        return None
    if isinstance(error, OSError) and error.errno is not None and error.strerror is not None:
        return {"errno": error.errno, "strerror": error.strerror}
    return {"error": f"{type(error).__name__}: {error}"}


def _agree_on_outcome(path, error):
    """Raises on every rank when the save failed on any: the failing rank its own error, the others
    the same `OSError` (or a `RuntimeError` naming the failing rank and its error).

    Replaces the barrier that ended a save: the file exists for every rank once this returns.
    """
    from tfring.ops import objects

    try:
        outcomes = objects.allgather_object(_outcome(error))
    except Exception as e:
        if error is not None:
            raise error from e  # a peer died: this rank's own error says more
        raise
    failed = [(rank, o) for rank, o in enumerate(outcomes) if o is not None]
    if error is not None:
        raise error
    if failed:
        rank, first = failed[0]
        if "errno" in first:
            raise OSError(first["errno"], first["strerror"])
        raise RuntimeError(f"tfring: saving `{path}` failed on rank {rank}: {first['error']}")


def _argument(original, name, args, kwargs):
    """The value of `original`'s argument `name` in this call (None when absent or unbindable)."""
    try:
        return inspect.signature(original).bind(None, None, *args, **kwargs).arguments.get(name)
    except TypeError:
        return None  # Keras raises its own error, on every rank alike


def _rank0_writes(original):
    @functools.wraps(original)
    def save(self, filepath, *args, **kwargs):
        strategy = ring_strategy_of(self)
        sharded = _argument(original, "max_shard_size", args, kwargs) is not None
        if strategy is None or not _is_local(filepath) or sharded:
            return original(self, filepath, *args, **kwargs)
        _save_started()
        path = os.path.abspath(os.fspath(filepath))
        zipped = _argument(original, "zipped", args, kwargs)
        error = result = target = None
        try:
            target = save_sinks.for_save(original.__name__, _name_for_keras(path), keep=strategy.rank == 0,
                                         zipped=zipped)
            result = original(self, target, *args, **kwargs)
            if strategy.rank == 0:
                partial_files.write_out(target, path, folder=zipped is False)
        except Exception as e:  # every rank learns of it below, and they stay in step
            error = e
        finally:
            if target is not None:
                save_sinks.release(target)
        _agree_on_outcome(path, error)
        return result

    return save


def _write_json_atomically(path, payload):
    # A fresh name no one could plant a link at, created exclusively (see file_safety).
    file_safety.write_atomically(path, json.dumps(payload).encode(), mode=0o666)


def _read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


# BackupAndRestore under RingStrategy keeps each backup's weights in a file of its own, named by
# the epoch and batch it belongs to, and commits a backup by renaming its metadata file into place
# (the metadata names the weights file). The weights and their epoch thus change together: a rank
# killed anywhere in the write leaves the previous backup whole, and a resumed run equals an
# uninterrupted one.
_WEIGHTS_KEY = "tfring_weights"


def _backup_weights_name(callback):
    return f"backup-epoch{callback._current_epoch}-batch{callback._last_batch_seen}.weights.h5"


def _remove_unreferenced_backups(callback):
    keep = set()
    for path in (callback._training_metadata_path, callback._prev_training_metadata_path):
        manifest = _read_json(path)
        if manifest and _WEIGHTS_KEY in manifest:
            keep.add(manifest[_WEIGHTS_KEY])
    for name in os.listdir(callback.backup_dir):
        if name.startswith("backup-epoch") and name.endswith(".weights.h5") and name not in keep:
            os.remove(os.path.join(callback.backup_dir, name))


def _backup_save_model(original):
    # Keras' BackupAndRestore._save_model: rank 0 writes, and the metadata file commits the backup.
    @functools.wraps(original)
    def _save_model(self):
        strategy = ring_strategy_of(self.model)
        needed = ("backup_dir", "_training_metadata_path", "_current_epoch", "_last_batch_seen")
        if strategy is None or not _is_local(self.backup_dir) or not all(hasattr(self, a) for a in needed):
            return original(self)
        if strategy.rank == 0:
            os.makedirs(self.backup_dir, exist_ok=True)
        name = _backup_weights_name(self)
        self.model.save_weights(filepath=os.path.join(self.backup_dir, name), overwrite=True)  # rank 0 writes
        if strategy.rank == 0:
            previous = _read_json(self._training_metadata_path)
            if getattr(self, "double_checkpoint", False) and previous is not None:
                _write_json_atomically(self._prev_training_metadata_path, previous)
            _write_json_atomically(self._training_metadata_path,  # the commit
                                   {"epoch": self._current_epoch, "batch": self._last_batch_seen, _WEIGHTS_KEY: name})
            _remove_unreferenced_backups(self)
        _barrier()

    return _save_model


def _backup_load_model(original):
    # Keras' BackupAndRestore._load_model for backups written by _backup_save_model, whoever resumes
    # them: a job of another size, one process with or without a RingStrategy (Keras' own loader
    # would look for its own file name, find none, and still take the backup's epoch).
    @functools.wraps(original)
    def _load_model(self):
        manifest = _read_json(getattr(self, "_training_metadata_path", ""))
        if not self.model.built or not manifest or _WEIGHTS_KEY not in manifest:
            return original(self)
        if self.model.optimizer is not None and not self.model.optimizer.built:
            self.model.optimizer.build(self.model.trainable_variables)  # as Keras does before loading
        self.model.load_weights(os.path.join(self.backup_dir, manifest[_WEIGHTS_KEY]))
        self.model._initial_epoch = manifest["epoch"]

    return _load_model


def _backup_train_end(original):
    @functools.wraps(original)
    def on_train_end(self, logs=None):
        strategy = ring_strategy_of(self.model)
        if strategy is None or not _is_local(getattr(self, "backup_dir", "")):
            return original(self, logs)
        if strategy.rank == 0:
            original(self, logs)  # deletes the backup folder
        _barrier()

    return on_train_end


def _tolerant_makedirs(original):
    # Keras checks "exists, else makedirs" (ModelCheckpoint does, for the checkpoint folder); with
    # every rank running the same callback one of them loses that race. Creating a folder that
    # another rank just created is not an error.
    @functools.wraps(original)
    def makedirs(path):
        if not _is_local(path):
            return original(path)
        return os.makedirs(path, exist_ok=True)

    return makedirs


# The save wraps pass `filepath` by position. `zipped` and `max_shard_size` they read by name, and
# only where the call has them: save_weights before Keras 3.10 has no max_shard_size.
PATCHES = [
    keras_patches.Patch("keras.src.utils.file_utils", "makedirs", _tolerant_makedirs,
                        "a folder another rank just created is not an error", parameters=("path",)),
    keras_patches.Patch("keras.Model", "save", _rank0_writes, "rank 0 alone writes a save",
                        parameters=("self", "filepath")),
    keras_patches.Patch("keras.Model", "save_weights", _rank0_writes, "rank 0 alone writes a save",
                        parameters=("self", "filepath")),
    keras_patches.Patch("keras.callbacks.BackupAndRestore", "_save_model", _backup_save_model,
                        "rank 0 writes the backup; its metadata file commits it", parameters=("self",)),
    keras_patches.Patch("keras.callbacks.BackupAndRestore", "_load_model", _backup_load_model,
                        "every rank restores the backup rank 0 committed", parameters=("self",)),
    keras_patches.Patch("keras.callbacks.BackupAndRestore", "on_train_end", _backup_train_end,
                        "rank 0 deletes the backup once every rank is done", parameters=("self", "logs")),
]

KERAS_INTERNALS = [
    keras_patches.Internal("keras.src.utils.file_utils", "is_remote_path", ("filepath",),
                           "a path Keras would copy through $TMPDIR gets the file's name only"),
]
