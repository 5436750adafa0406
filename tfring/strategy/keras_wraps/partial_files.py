"""Rank 0 writes a save under a partial name beside the target and renames it when complete.

A reader never sees half a file, and a full disk leaves the earlier file as it was. The partial
name carries this host, this process and a random part, so in a folder others share (a sticky
folder like /tmp) no one can plant a file at it beforehand, and rank 0 removes only partial files
it can tell are its own user's leftovers on this host (a file it may not remove never fails a save).
"""

import errno
import os
import secrets
import shutil
import socket
import stat

from tfring import file_safety
from tfring.strategy.keras_wraps import save_sinks


def _partial_prefix(host=None):
    return f".tfring-partial-{host or socket.gethostname()}-"


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _is_stale_partial(directory, name, prefix):
    """Whether `name` is a partial file a killed save of this user on this host left behind.

    In a folder others share, a file can be named like a partial and be someone else's: only a
    regular file this user owns, named for this host and a process no longer running, qualifies.
    """
    if not name.startswith(prefix):
        return False
    pid = name[len(prefix):].split("-", 1)[0]
    if not pid.isdigit() or _pid_alive(int(pid)):
        return False
    try:
        st = os.lstat(os.path.join(directory, name))
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid()


def remove_stale(directory):
    """Deletes partial files that a killed save of this user on this host left behind (not a live
    job's, not another user's). A file it may not list or remove never fails the save.

    Args:
        directory: the folder a save writes into.

    Example:

    >>> remove_stale("/tmp/ckpt")
    """
    prefix = _partial_prefix()
    try:
        names = os.listdir(directory)
    except OSError:
        return  # a folder one may write into but not list: nothing to clean
    for name in names:
        if _is_stale_partial(directory, name, prefix):
            try:
                os.remove(os.path.join(directory, name))
            except OSError:
                pass  # another job cleaned it first, or it is not ours to remove after all


def _remove_partial(partial):
    # Only what exists: on a read-only file system, removing a name that was never made fails too
    # (EROFS before the name is looked up), and that error would hide the one to report.
    try:
        if os.path.isdir(partial) and not os.path.islink(partial):
            shutil.rmtree(partial)
        elif os.path.lexists(partial):
            os.remove(partial)
    except FileNotFoundError:
        pass


def _unwritable(path, error):
    """The error every rank raises when rank 0 could not write `path` (naming it, not the partial)."""
    directory = os.path.dirname(path)
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        fix = f"the disk holding `{directory}` is full or over quota; free space there or save elsewhere"
    elif error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        fix = f"this user may not write into `{directory}`; save into a folder you can write"
    else:
        fix = "check that folder, or save elsewhere"
    message = (f"{error.strerror or error}: tfring could not save `{path}`: {fix}. The incomplete file was "
               f"removed; an earlier `{os.path.basename(path)}`, if any, is unchanged")
    return OSError(error.errno, message) if error.errno is not None else OSError(message)


def _replace(partial, path):
    """Renames `partial` to `path`; a folder (`zipped=False`) replaces an earlier folder there, as
    Keras' own save writes over one."""
    try:
        os.replace(partial, path)
    except OSError as e:
        if e.errno not in (errno.ENOTEMPTY, errno.EEXIST) or not os.path.isdir(partial) or os.path.islink(path):
            raise
        earlier = f"{partial}-earlier"
        os.rename(path, earlier)
        try:
            os.rename(partial, path)
        except OSError:
            os.rename(earlier, path)  # the earlier folder stays
            raise
        shutil.rmtree(earlier, ignore_errors=True)


def write_out(target, path, folder=False):
    """Rank 0: writes what Keras saved into `target` to `path`, under a partial name renamed when complete.

    Args:
        target: the in-memory file Keras saved into (`save_sinks`).
        path: the user's absolute path.
        folder: unpack the `.keras` archive in `target` into a folder (`zipped=False`).

    Raises:
        OSError: naming `path` and what to do (the partial is removed; an earlier file is unchanged).

    Example:

    >>> write_out(target, "/ckpt/epoch1.keras")

    The partial name carries this host, this process and a random part, so no one can plant a file
    at it beforehand, and `remove_stale` can tell a killed save's leftover from a live one.
    """
    directory, name = os.path.split(path)
    partial = os.path.join(directory, f"{_partial_prefix()}{os.getpid()}-{secrets.token_hex(4)}-{name}")
    try:
        os.makedirs(directory, exist_ok=True)
        remove_stale(directory)
        if folder:
            save_sinks.write_folder(target, partial)
        else:
            with save_sinks.contents(target) as data, file_safety.create_exclusive(partial, 0o666) as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        _replace(partial, path)
    except OSError as e:
        _remove_partial(partial)
        raise _unwritable(path, e) from e
