"""Node-local staging: `tfring.data.stage(prefix, local_dir)` copies a converted dataset to each host's
own disk once, so that every epoch reads local files instead of the shared file system or a bucket.

On each host, local rank 0 makes the copy (`local_copy`: a folder of its own per dataset identity,
shards verified against the meta file's SHA-256, reused when whole). Meanwhile every rank of the
job takes part in a small allgather once a second, in which each copier says how it is doing: all
ranks leave together, with the copy made on every host, or with the same error naming the rank and
host that failed (a full disk, a damaged shard), or when the deadline passes. No rank waits out the
timeout for a host that has already failed, and nothing is reported through files on that disk.
"""

import json
import os
import socket
import threading
import time

from tfring import checks
from tfring import runtime
from tfring.data import local_copy
from tfring.data import meta as meta_lib

_ROUND = 1.0  # seconds between the job's status rounds while a copy runs


def _meta_text(prefix):
    path = prefix + meta_lib.META_SUFFIX
    meta_lib.load_meta(prefix)  # a clear error for a missing or foreign meta file
    with meta_lib.open_file(path, "r") as f:
        return f.read()


def _exchange(status):
    """Every rank's status, in rank order (one allgather of small JSON values)."""
    from tfring.ops import objects

    return objects.allgather_object(status)


class _Copier(threading.Thread):
    """Local rank 0's copy, in the background while the main thread takes part in the status rounds."""

    def __init__(self, make_copy):
        super().__init__(name="tfring-stage", daemon=True)
        self.make_copy, self.error, self.finished = make_copy, None, threading.Event()
        self.cancel = threading.Event()

    def run(self):
        try:
            self.make_copy(self.cancel.is_set)
        except BaseException as e:  # reported to every rank, then raised here
            self.error = e
        finally:
            self.finished.set()

    def status(self):
        if not self.finished.is_set():
            return "copying"
        return "done" if self.error is None else f"{type(self.error).__name__}: {self.error}"


def _await_copies(copier, folder, timeout):
    """Status rounds until every host's copy is done, one failed, or the deadline passed (on every rank at once)."""
    deadline = time.monotonic() + timeout
    host = socket.gethostname()
    while True:
        if copier:  # the copiers pace the rounds; the other ranks wait in the allgather
            copier.finished.wait(_ROUND)
        mine = copier.status() if copier else "waiting"
        statuses = _exchange([mine, host, time.monotonic() > deadline])
        failed = [(r, s) for r, s in enumerate(statuses) if s[0] not in ("copying", "done", "waiting")]
        if failed:
            _fail(copier, failed[0], folder)
        if all(s[0] != "copying" for s in statuses):
            return
        if any(s[2] for s in statuses):
            late = ", ".join(f"rank {r} on {s[1]}" for r, s in enumerate(statuses) if s[0] == "copying")
            _stop(copier)
            raise TimeoutError(f"tfring.data.stage: the copy to {folder} did not finish within {timeout:g} s "
                               f"(still copying: {late}); raise `timeout` for a larger dataset")


def _stop(copier):
    """Stops this host's copy (it removes its partial file) before the error leaves this rank."""
    if copier:
        copier.cancel.set()
        copier.finished.wait(10)


def _fail(copier, failure, folder):
    rank, (message, host, _) = failure
    _stop(copier)
    if copier and copier.error is not None and not isinstance(copier.error, local_copy.Cancelled):
        raise copier.error
    raise RuntimeError(f"tfring.data.stage: rank {rank} on host {host} could not copy the dataset to its local "
                       f"disk ({folder} here): {message}")


def stage(prefix, local_dir, timeout=3600.0, folder_mode=0o700):
    """Copies the converted dataset at `prefix` to `local_dir` on each host, once, and returns its new prefix.

    Call it on every rank (after `tfring.init()` or under `RingStrategy`): local rank 0 of each host
    copies and verifies, the host's other ranks wait for it, and every rank returns when every host
    is done, or raises the same error when one failed. Give each host a folder on its own disk
    (node-local scratch, e.g. `/local_scratch/$USER`). The copy goes into a folder of its own,
    `local_dir/<name>.<digest of the meta file>/`, so that another dataset of the same name (another
    job's, or this one converted again) never replaces it; older copies are not removed.

    `local_dir` must be this user's own: one that another user owns or can write is refused. A
    reused copy is read once to check its SHA-256 against the meta file's.

    Args:
        prefix: the dataset's prefix as `tfring convert` wrote it (a local path, or any
            `tf.io.gfile` URL such as `gs://bucket/train`).
        local_dir: a folder on this host's own disk (created, with `folder_mode`, if missing).
        timeout: seconds the job waits for the slowest host's copy.
        folder_mode: permissions of the folders created (only you, 0o700, unless you say
            otherwise). Shards are never more readable than their source.

    Returns:
        The local prefix (`local_dir/<name>.<digest>/<name>`), to pass to `tfring.data.tfrecord_dataset`.

    Raises:
        FileNotFoundError: no meta file at `prefix`.
        PermissionError: `local_dir` (or the copy's folder) belongs to another user or others can
            write to it (`tfring.file_safety.UnsafePathError`); on the copying rank.
        OSError: `local_dir` lacks the space for the shards still to copy (checked before copying,
            in whole blocks), or it filled up; on the copying rank.
        ValueError: a shard's SHA-256 differs from the one its meta file recorded; on the copying rank.
        RuntimeError: on every other rank, when some host's copy failed (its rank, host and error
            quoted).
        TimeoutError: on every rank, the copies took longer than `timeout`.

    Example:

    >>> local = tfring.data.stage("/shared/imagenet/train", "/local_scratch/imagenet")
    >>> ds = tfring.data.tfrecord_dataset(local, batch_size=256)
    """
    timeout = checks.number("tfring.data.stage", "timeout", timeout, above=0, unit="seconds")
    folder_mode = checks.number("tfring.data.stage", "folder_mode", folder_mode, integer=True, at_least=0o700,
                                below=0o1000, expected="permissions such as 0o700 or 0o755")
    text = _meta_text(prefix)
    meta = meta_lib.DatasetMeta.from_json(json.loads(text), where=prefix + meta_lib.META_SUFFIX)
    name = os.path.basename(prefix.rstrip("/"))
    folder = local_copy.folder_for(local_dir, name, text)
    copier = None
    if runtime.local_rank() == 0:
        copier = _Copier(lambda cancelled: local_copy.make(prefix, folder, meta, text, cancelled, timeout, folder_mode))
        copier.start()
    _await_copies(copier, folder, timeout)
    return os.path.join(folder, name)
