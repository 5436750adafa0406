"""One host's copy of a converted dataset, made by `tfring.data.stage` on local rank 0.

The copy lives in its own folder, keyed by the dataset's identity: `local_dir/<name>.<digest>/`,
where `<digest>` is the first 16 hex digits of the meta file's SHA-256. Two datasets with the same
name (two jobs, or a dataset converted again) never share a folder, and the files of a complete
copy are never replaced by another dataset's while a job reads them.

Every folder and file is this user's own (`tfring.file_safety`): `local_dir` and the copy's folder
are created 0700 (or checked when they exist: another user's folder, or one others can write, is
refused), shards are written under fresh temporary names and renamed into place, no more readable
than their source. Two copiers of the same dataset on one host (two jobs) take turns on a lock in
the copy's folder. Under the lock, leftovers of killed copies are removed, and every shard already
there is hashed: a shard is reused only when its SHA-256 equals the meta file's (reusing a copy
reads it once). Before copying, the free space is compared with what the shards still to copy will
occupy, in whole blocks, with a margin; a failed copy removes its partial file.
"""

import concurrent.futures
import errno
import fcntl
import hashlib
import os
import stat
import time

from tfring import file_safety
from tfring.data import meta as meta_lib

_BLOCK = 1 << 22
_PARTIAL = ".partial-"
_LOCK = ".lock"
_MARGIN_BLOCKS = 64  # the meta file, directory entries and rounding on top of the shards' blocks


class Cancelled(Exception):
    """The job gave up waiting (its deadline passed, or another host failed) while this copy ran."""


def folder_for(local_dir, name, meta_text):
    """The folder of this dataset's copy: `local_dir/<name>.<first 16 hex digits of the meta's SHA-256>`."""
    return os.path.join(local_dir, f"{name}.{hashlib.sha256(meta_text.encode()).hexdigest()[:16]}")


def make(prefix, folder, meta, meta_text, cancelled, timeout, folder_mode=0o700):
    """Makes (or verifies and reuses) the copy of the dataset at `prefix` in `folder`.

    Args:
        prefix: the source dataset's prefix.
        folder: from `folder_for`.
        meta: the source's `DatasetMeta`.
        meta_text: its meta file's text, written beside the copy.
        cancelled: a callable; True once the caller gave up (the copy stops and cleans up).
        timeout: seconds to wait for another copier of the same dataset.
        folder_mode: permissions of the folders created.
    """
    file_safety.make_private_dir(os.path.dirname(folder), "tfring.data.stage: local_dir", folder_mode)
    file_safety.make_private_dir(folder, "tfring.data.stage: the copy's folder", folder_mode)
    with _locked(os.path.join(folder, _LOCK), cancelled, timeout):
        _remove_leftovers(folder)
        to_copy = _shards_to_copy(folder, meta.shards)
        _check_space(folder, to_copy, len(meta_text))
        source_folder = os.path.dirname(prefix)
        for shard in to_copy:
            source = f"{source_folder}/{shard['file']}" if source_folder else shard["file"]
            _copy_shard(source, os.path.join(folder, shard["file"]), shard, cancelled)
        _write_meta(os.path.join(folder, os.path.basename(prefix.rstrip("/")) + meta_lib.META_SUFFIX), meta_text)


def _write_meta(path, text):
    """Writes the meta file beside the shards, unless this user's own file already holds exactly it."""
    try:
        file_safety.check_own_file(path)
        with open(path, "rb") as f:
            if f.read() == text.encode():
                return
    except (OSError, file_safety.UnsafePathError):
        pass
    file_safety.write_atomically(path, text.encode(), mode=0o600)


class _locked:
    """Holds an exclusive flock on `path` (polled, so that it gives up at the deadline or on cancel)."""

    def __init__(self, path, cancelled, timeout):
        self.path, self.cancelled, self.timeout = path, cancelled, timeout

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except BlockingIOError:
                if self.cancelled():
                    os.close(self.fd)
                    raise Cancelled()
                if time.monotonic() > deadline:
                    os.close(self.fd)
                    raise TimeoutError(f"tfring.data.stage: another copy of this dataset into {os.path.dirname(self.path)} "
                                       f"(another job on this host) held its lock for more than {self.timeout:g} s")
                time.sleep(0.1)

    def __exit__(self, *exc):
        os.close(self.fd)  # releases the lock


def _remove_leftovers(folder):
    """Removes partial shards of copies that were killed (under the lock, no copy is running)."""
    for name in os.listdir(folder):
        if _PARTIAL in name or name.startswith(".") and ".tfring-" in name:
            _remove(os.path.join(folder, name))


def _shards_to_copy(folder, shards):
    """The shards that are not already there, whole: own regular files of the right size and SHA-256."""
    workers = max(1, min(4, os.cpu_count() or 1))
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        there = list(pool.map(lambda s: _already_there(folder, s), shards))
    return [s for s, ok in zip(shards, there) if not ok]


def _already_there(folder, shard):
    path = os.path.join(folder, shard["file"])
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_size != shard["bytes"]:
        _remove(path)  # whatever it is, it is not the shard
        return False
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_BLOCK):
            h.update(block)
    return h.hexdigest() == shard["sha256"]


def space_needed(shards, extra_bytes, block_size):
    """Bytes the shards occupy on a file system with `block_size` blocks, plus a margin.

    Example:

    >>> space_needed([{"bytes": 100}, {"bytes": 5000}], 10, 4096)  # 1 + 2 blocks, the meta, 64
    282624
    """
    blocks = sum(-(-s["bytes"] // block_size) for s in shards) + -(-extra_bytes // block_size) + _MARGIN_BLOCKS
    return blocks * block_size


def _check_space(folder, to_copy, extra_bytes):
    fs = os.statvfs(folder)
    need = space_needed(to_copy, extra_bytes, fs.f_frsize)
    free = fs.f_bavail * fs.f_frsize
    if need > free:
        raise OSError(errno.ENOSPC, f"tfring.data.stage: {folder} has {free / 2**20:.1f} MiB free but the dataset needs "
                      f"{need / 2**20:.1f} MiB more ({len(to_copy)} shards, counted in "
                      f"{fs.f_frsize}-byte blocks): choose a larger local disk (nothing was copied)")


def _mode_for(source):
    """The copy's permissions: never writable by others, and no more readable than a local source."""
    if meta_lib.is_remote(source):
        return 0o600
    return os.stat(source).st_mode & 0o644


def _copy_shard(source, target, shard, cancelled):
    """Copies one shard under a fresh temporary name, hashing it on the way; renames it only when it matches."""
    partial = f"{target}{_PARTIAL}{os.getpid()}"
    try:
        h = hashlib.sha256()
        with meta_lib.open_file(source, "rb") as src, file_safety.create_exclusive(partial, 0o600) as dst:
            while block := src.read(_BLOCK):
                if cancelled():
                    raise Cancelled()
                h.update(block)
                dst.write(block)
        if h.hexdigest() != shard["sha256"]:
            raise ValueError(f"tfring.data.stage: {source} does not match the SHA-256 its meta file recorded "
                             f"({h.hexdigest()[:16]}… instead of {shard['sha256'][:16]}…): the shard changed or is "
                             "damaged since conversion; convert the data again")
        os.chmod(partial, _mode_for(source))
        os.replace(partial, target)
    except BaseException as e:
        _remove(partial)
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise OSError(e.errno, f"tfring.data.stage: the disk of {os.path.dirname(target)} filled up while copying "
                          f"{shard['file']} ({e.strerror}); the partial file was removed: free space or choose a "
                          "larger local disk") from e
        raise


def _remove(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
