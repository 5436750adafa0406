"""Node-local staging: `tfring.data.stage(prefix, local_dir)` copies a converted dataset to each host's
own disk once, so that every epoch reads local files instead of the shared file system or a bucket.

On each host, local rank 0 copies; the host's other ranks wait for its completion marker (or its
error file). Every shard is hashed while it is copied and compared with the SHA-256 the meta file
recorded at conversion; a shard lands under its name only when it matches. A complete earlier copy
(its marker names the same meta file contents, every shard has its recorded size) is reused
without copying; after an interrupted copy, shards already there are hashed and kept when they
match. Before copying, the free space of `local_dir` is compared with what is still to copy.
"""

import hashlib
import json
import os
import shutil
import time

from tfring import checks
from tfring import runtime
from tfring.data import meta as meta_lib
from tfring.data.shard_writer import sha256_of

MARKER_SUFFIX = ".staged.json"
ERROR_SUFFIX = ".stage-error"
_BLOCK = 1 << 22
_CLOCK_SKEW = 30.0  # seconds an error file may predate a waiting rank's start and still be this run's


def _meta_text(prefix):
    path = prefix + meta_lib.META_SUFFIX
    meta_lib.load_meta(prefix)  # a clear error for a missing or foreign meta file
    with meta_lib.open_file(path, "r") as f:
        return f.read()


def _digest(text):
    return hashlib.sha256(text.encode()).hexdigest()


def _marker_matches(local_prefix, digest):
    try:
        with open(local_prefix + MARKER_SUFFIX) as f:
            return json.load(f).get("meta_sha256") == digest
    except (OSError, ValueError):
        return False


def _is_complete(local_prefix, meta, digest):
    folder = os.path.dirname(local_prefix)
    return _marker_matches(local_prefix, digest) and all(
        os.path.exists(os.path.join(folder, s["file"])) and os.path.getsize(os.path.join(folder, s["file"])) == s["bytes"]
        for s in meta.shards)


def _already_there(folder, shard):
    """Whether an earlier, interrupted copy left this shard whole (its size and SHA-256 match)."""
    path = os.path.join(folder, shard["file"])
    return (os.path.exists(path) and os.path.getsize(path) == shard["bytes"]
            and sha256_of(path) == shard["sha256"])


def _check_space(local_dir, to_copy):
    need = sum(s["bytes"] for s in to_copy)
    free = shutil.disk_usage(local_dir).free
    if need > free:
        raise OSError(f"tfring.data.stage: {local_dir} has {free / 2**20:.1f} MiB free but the dataset needs "
                      f"{need / 2**20:.1f} MiB more: choose a larger local disk (nothing was copied)")


def _copy_shard(source, target, shard):
    """Copies one shard to `target` through a temporary name, hashing it on the way."""
    partial = f"{target}.partial-{os.getpid()}"
    h = hashlib.sha256()
    with meta_lib.open_file(source, "rb") as src, open(partial, "wb") as dst:
        while block := src.read(_BLOCK):
            h.update(block)
            dst.write(block)
    if h.hexdigest() != shard["sha256"]:
        os.unlink(partial)
        raise ValueError(f"tfring.data.stage: {source} does not match the SHA-256 its meta file recorded "
                         f"({h.hexdigest()[:16]}… instead of {shard['sha256'][:16]}…): the shard changed or is "
                         "damaged since conversion; convert the data again")
    os.replace(partial, target)


def _remove(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _copy(prefix, local_prefix, meta, text, local_dir):
    folder = os.path.dirname(local_prefix)
    source_folder = os.path.dirname(prefix)
    if _is_complete(local_prefix, meta, _digest(text)):
        return
    _remove(local_prefix + MARKER_SUFFIX)  # what follows is a new copy
    to_copy = [shard for shard in meta.shards if not _already_there(folder, shard)]
    _check_space(local_dir, to_copy)
    for shard in to_copy:
        source = f"{source_folder}/{shard['file']}" if source_folder else shard["file"]
        _copy_shard(source, os.path.join(folder, shard["file"]), shard)
    with open(local_prefix + meta_lib.META_SUFFIX, "w") as f:
        f.write(text)
    meta_lib.write_json_atomically(local_prefix + MARKER_SUFFIX, {"meta_sha256": _digest(text), "source": prefix})


def _copy_or_report(prefix, local_prefix, meta, text, local_dir):
    """Local rank 0: copies; on failure leaves the error for the host's waiting ranks, then raises it."""
    _remove(local_prefix + ERROR_SUFFIX)
    try:
        _copy(prefix, local_prefix, meta, text, local_dir)
    except Exception as e:
        with open(local_prefix + ERROR_SUFFIX, "w") as f:
            f.write(f"{type(e).__name__}: {e}")
        raise


def _reported_error(local_prefix, began):
    try:
        with open(local_prefix + ERROR_SUFFIX) as f:
            if os.fstat(f.fileno()).st_mtime >= began - _CLOCK_SKEW:
                return f.read()
    except OSError:
        pass
    return None


def _wait_for_copy(local_prefix, meta, digest, timeout, poll=0.2):
    deadline, began = time.monotonic() + timeout, time.time()
    while not _is_complete(local_prefix, meta, digest):
        error = _reported_error(local_prefix, began)
        if error:
            raise RuntimeError(f"tfring.data.stage: local rank 0 could not copy to {local_prefix}: {error}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"tfring.data.stage: local rank 0 did not finish copying to {local_prefix} within "
                               f"{timeout:g} s (its own error, if any, is in its output)")
        time.sleep(poll)


def stage(prefix, local_dir, timeout=3600.0):
    """Copies the converted dataset at `prefix` to `local_dir` on each host, once, and returns its new prefix.

    Call it on every rank (after `tfring.init()` or under `RingStrategy`): local rank 0 of each host
    copies and verifies, the host's other ranks wait for it. Give each host a directory on its own
    disk (node-local scratch, e.g. `/local_scratch/$USER`).

    Args:
        prefix: the dataset's prefix as `tfring convert` wrote it (a local path, or any
            `tf.io.gfile` URL such as `gs://bucket/train`).
        local_dir: a directory on this host's own disk (created if missing).
        timeout: seconds the other ranks of a host wait for local rank 0's copy.

    Returns:
        The local prefix (`local_dir/<name>`), to pass to `tfring.data.tfrecord_dataset`.

    Raises:
        FileNotFoundError: no meta file at `prefix`.
        OSError: `local_dir` lacks the space for the shards still to copy (checked before copying).
        ValueError: a shard's SHA-256 differs from the one its meta file recorded.
        RuntimeError: on the host's other ranks, local rank 0's copy failed (its error quoted).
        TimeoutError: on the other ranks, the copy took longer than `timeout`.

    Example:

    >>> local = tfring.data.stage("/shared/imagenet/train", "/local_scratch/imagenet")
    >>> ds = tfring.data.tfrecord_dataset(local, batch_size=256)
    """
    timeout = checks.number("tfring.data.stage", "timeout", timeout, above=0, unit="seconds")
    text = _meta_text(prefix)
    meta = meta_lib.DatasetMeta.from_json(json.loads(text), where=prefix + meta_lib.META_SUFFIX)
    os.makedirs(local_dir, exist_ok=True)
    local_prefix = os.path.join(local_dir, os.path.basename(prefix.rstrip("/")))
    if runtime.local_rank() == 0:
        _copy_or_report(prefix, local_prefix, meta, text, local_dir)
    else:
        _wait_for_copy(local_prefix, meta, _digest(text), timeout)
    return local_prefix
