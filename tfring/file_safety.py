"""Writing into folders someone else may share: the one rule every tfring writer follows.

Any folder tfring writes into or reads its own state from (a node-local staging folder in
scratch, `tfring run --output-dir`, a rendezvous file in a shared working directory, a
checkpoint folder) may have been prepared by another local user: a symlink planted at the name
tfring is about to write, a folder they own and can refill, a forged marker. So:

- A folder tfring keeps private state in must be owned by this user and writable by nobody else
  (`check_private_dir`, `make_private_dir`); the error names its owner and mode.
- Files are created, never opened by an existing name for writing: `create_exclusive` uses
  `O_CREAT | O_EXCL | O_NOFOLLOW`, and `write_atomically` writes a fresh temporary name and
  renames it into a folder that passed the check.
- A file read back as state (a marker, a reused copy) must be a regular file this user owns that
  nobody else can write (`check_own_file`).

Root is "this user" like any other: a folder another uid owns is refused even to root, who could
otherwise be made to write through someone else's symlink.
"""

import os
import pwd
import secrets
import stat


class UnsafePathError(PermissionError):
    """A folder or file that another user owns or can write, where tfring keeps its own state."""


def _owner_name(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _describe(st):
    return f"owned by {_owner_name(st.st_uid)} with mode {stat.filemode(st.st_mode)} ({st.st_mode & 0o7777:04o})"


def _refusal(path, what, st):
    """Why `st` is not private to this user, or None when it is."""
    if st.st_uid != os.geteuid():
        return f"{what} `{path}` is {_describe(st)}, not by {_owner_name(os.geteuid())}"
    if st.st_mode & 0o022:
        return f"{what} `{path}` is {_describe(st)}: others can write to it"
    return None


def check_private_dir(path, what="folder"):
    """Refuses a folder that is a symlink, not a folder, owned by another user, or writable by others.

    Args:
        path: the folder.
        what: what the folder is for, to start the message (e.g. `"stage: local_dir"`).

    Raises:
        UnsafePathError: the folder is not private to this user; the message names its owner and
            mode and how to fix it.
        FileNotFoundError: it does not exist.

    Example:

    >>> import tempfile
    >>> check_private_dir(tempfile.mkdtemp())
    """
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(f"{what} `{path}` is a symbolic link: tfring writes only into a real folder "
                              "of its own; give the folder it points to")
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePathError(f"{what} `{path}` is not a folder")
    why = _refusal(path, what, st)
    if why:
        raise UnsafePathError(f"{why}. tfring keeps files there that another user could replace or read; "
                              "use a folder of your own that only you can write (`chmod go-w`), or "
                              "remove this one if it is yours to remove")


def make_private_dir(path, what="folder", mode=0o700):
    """Creates `path` (and missing parents) with `mode`, or checks an existing one with `check_private_dir`.

    Args:
        path: the folder.
        what: what the folder is for, for the message.
        mode: the new folder's permissions; 0o700 (only this user) unless the caller says otherwise.

    Raises:
        UnsafePathError: the folder exists and is not private to this user.

    Example:

    >>> import os, tempfile
    >>> folder = os.path.join(tempfile.mkdtemp(), "cache")
    >>> make_private_dir(folder)
    >>> oct(os.stat(folder).st_mode & 0o777)
    '0o700'
    """
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, mode=0o700, exist_ok=True)
    try:
        os.mkdir(path, mode)
        os.chmod(path, mode)  # the umask may have taken bits away
    except FileExistsError:
        pass
    check_private_dir(path, what)


def check_own_file(path, what="file"):
    """Refuses a file tfring reads back as its own state that is a link, not a regular file, foreign or writable by others.

    Args:
        path: the file.
        what: what it is, for the message.

    Raises:
        UnsafePathError: the file is not private to this user.
        FileNotFoundError: it does not exist.

    Example:

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "marker")
    >>> write_atomically(path, b"{}")
    >>> check_own_file(path)
    """
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        raise UnsafePathError(f"{what} `{path}` is not a regular file ({stat.filemode(st.st_mode)})")
    why = _refusal(path, what, st)
    if why:
        raise UnsafePathError(why)


def create_exclusive(path, mode=0o600):
    """Opens a new file for writing; never an existing name, never through a symlink.

    Args:
        path: the file to create.
        mode: its permissions (before the umask).

    Returns:
        A file object opened for binary writing.

    Raises:
        FileExistsError: something (a file, a link) already has that name.

    Example:

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "rank.0.log")
    >>> with create_exclusive(path) as f:
    ...     _ = f.write(b"hello")
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    return os.fdopen(os.open(path, flags, mode), "wb")


def temporary_name(path):
    """A fresh name beside `path` for writing it before an atomic rename: `.<name>.tfring-<random>`.

    Example:

    >>> temporary_name("/data/x.json").startswith("/data/.x.json.tfring-")
    True
    """
    folder, name = os.path.split(path)
    return os.path.join(folder, f".{name}.tfring-{secrets.token_hex(6)}")


def write_atomically(path, data, mode=0o600):
    """Writes `data` under a fresh temporary name in `path`'s folder, then renames it to `path`.

    Readers see the old file or the whole new one. The rename replaces whatever had the name
    (a file or a symlink: the link itself, never what it points to). Check the folder first.

    Args:
        path: the final name.
        data: bytes to write.
        mode: the file's permissions.

    Example:

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "done.json")
    >>> write_atomically(path, b"{}")
    >>> open(path).read()
    '{}'
    """
    tmp = temporary_name(path)
    try:
        with create_exclusive(tmp, mode) as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
