"""Checkpoint writes under RingStrategy: every rank runs Keras' saving code, rank 0 keeps the file.

Every rank must take part in a save, because saving can read sync-on-read state (metrics), and
that read is a collective. So `model.save`, `model.save_weights`, `ModelCheckpoint` and
`BackupAndRestore` still run on every rank, but only rank 0's output is kept: it is written under a
temporary name beside the target and renamed when complete (a reader never sees half a file),
while the other ranks write to a scratch folder that is deleted. A barrier at the end means the
file exists for every rank when the call returns.

`install()` wraps those Keras methods once; models that do not belong to a multi-rank
RingStrategy are saved exactly as before.
"""

import functools
import json
import os
import shutil
import tempfile

_MARK = "_tfring_rank0_writes"


def _ring_strategy(model):
    from tfring.strategy.ring_strategy import RingStrategy

    strategy = getattr(model, "_distribute_strategy", None)
    if isinstance(strategy, RingStrategy) and strategy.size > 1:
        return strategy
    return None


def _barrier():
    from tfring.ops import collectives

    collectives.barrier()


def _is_local(path):
    return "://" not in str(path)


def _rank0_writes(original):
    @functools.wraps(original)
    def save(self, filepath, *args, **kwargs):
        strategy = _ring_strategy(self)
        sharded = kwargs.get("max_shard_size") is not None
        if strategy is None or not _is_local(filepath) or sharded:
            return original(self, filepath, *args, **kwargs)
        path = os.path.abspath(os.fspath(filepath))
        directory, name = os.path.split(path)
        scratch = None
        if strategy.rank == 0:
            os.makedirs(directory, exist_ok=True)
            partial = os.path.join(directory, f".tfring-partial-{os.getpid()}-{name}")  # same extension
        else:
            scratch = tempfile.mkdtemp(prefix="tfring-discard-")
            partial = os.path.join(scratch, name)
        try:
            result = original(self, partial, *args, **kwargs)
            if strategy.rank == 0:
                os.replace(partial, path)
        finally:
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
            elif os.path.exists(partial):
                os.remove(partial)  # a failed save leaves no partial file behind
        _barrier()
        return result

    setattr(save, _MARK, True)
    return save


def _write_json_atomically(path, payload):
    partial = f"{path}.tfring-partial-{os.getpid()}"
    with open(partial, "w") as f:
        f.write(json.dumps(payload))
    os.replace(partial, path)


def _backup_save_model(original):
    # Keras' BackupAndRestore._save_model, with its file operations done by rank 0 alone.
    @functools.wraps(original)
    def _save_model(self):
        strategy = _ring_strategy(self.model)
        needed = ("backup_dir", "_weights_path", "_training_metadata_path", "_current_epoch", "_last_batch_seen")
        if strategy is None or not _is_local(self.backup_dir) or not all(hasattr(self, a) for a in needed):
            return original(self)
        if strategy.rank == 0:
            os.makedirs(self.backup_dir, exist_ok=True)
            if getattr(self, "double_checkpoint", False):
                for src, dst in ((self._weights_path, self._prev_weights_path),
                                 (self._training_metadata_path, self._prev_training_metadata_path)):
                    if os.path.exists(src):
                        shutil.copy(src, dst)
        _barrier()
        self.model.save_weights(filepath=self._weights_path, overwrite=True)  # rank 0 writes
        if strategy.rank == 0:
            _write_json_atomically(self._training_metadata_path,
                                   {"epoch": self._current_epoch, "batch": self._last_batch_seen})
        _barrier()

    setattr(_save_model, _MARK, True)
    return _save_model


def _backup_train_end(original):
    @functools.wraps(original)
    def on_train_end(self, logs=None):
        strategy = _ring_strategy(self.model)
        if strategy is None or not _is_local(getattr(self, "backup_dir", "")):
            return original(self, logs)
        if strategy.rank == 0:
            original(self, logs)  # deletes the backup folder
        _barrier()

    setattr(on_train_end, _MARK, True)
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

    setattr(makedirs, _MARK, True)
    return makedirs


def install():
    """Wraps Keras' save methods so that under a multi-rank RingStrategy only rank 0 writes (and
    makes Keras' folder creation tolerate the folder another rank just created).

    Idempotent; called by `RingStrategy()`.

    Example:

    >>> install()
    """
    import keras
    from keras.src.utils import file_utils

    targets = [(file_utils, "makedirs", _tolerant_makedirs),
               (keras.Model, "save", _rank0_writes), (keras.Model, "save_weights", _rank0_writes),
               (keras.callbacks.BackupAndRestore, "_save_model", _backup_save_model),
               (keras.callbacks.BackupAndRestore, "on_train_end", _backup_train_end)]
    for cls, name, wrap in targets:
        current = getattr(cls, name, None)
        if current is not None and not getattr(current, _MARK, False):
            setattr(cls, name, wrap(current))
