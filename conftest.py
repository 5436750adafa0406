"""Test-suite rules shared by every test directory.

Markers (pytest.ini lists them):
- `multiprocess`: the test starts processes (a tfring job, mpirun, a child Python, a compiler). `make check`
  runs everything else, in under a minute. An unmarked test that starts a Python process, a
  `tfring` command or a launcher fails, saying to add the marker, so the fast loop stays fast.
- `tensorflow_io`: the test needs tensorflow-io, which loads on TensorFlow 2.17 only; elsewhere
  it is skipped, saying why.

Fixtures:
- `other_user`: a second local user for the hostile-neighbour tests (created with `useradd`,
  removed with `userdel` afterwards whatever happens; needs root, skipped otherwise).
- `small_disk` / `small_disk_for_module`: `mount(size)` mounts a tmpfs of `size` (e.g. "64k") in a
  new folder and returns it, for full-disk tests; unmounted afterwards (needs root, skipped otherwise).
"""

import os
import pwd
import contextlib
import secrets
import shutil
import subprocess
import sys
from types import SimpleNamespace

import pytest

_LAUNCHERS = {"tfring", "mpirun", "mpiexec", "srun", "ssh"}


def _starts_a_job(argv):
    if isinstance(argv, (str, bytes, os.PathLike)):
        argv = [argv]
    first = os.path.basename(os.fsdecode(list(argv)[0])) if argv else ""
    return first.startswith("python") or os.fsdecode(list(argv)[0]) == sys.executable or first in _LAUNCHERS


@pytest.fixture(autouse=True)
def _processes_need_the_marker(request, monkeypatch):
    if request.node.get_closest_marker("multiprocess"):
        return
    real_init = subprocess.Popen.__init__

    def guarded(self, args, *rest, **kwargs):
        if _starts_a_job(args):
            raise AssertionError(f"{request.node.nodeid} starts a process ({args!r:.120}): mark it "
                                 f"@pytest.mark.multiprocess (make check skips those)")
        real_init(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", guarded)


def _tensorflow_io_loads():
    try:
        import tensorflow_io  # noqa: F401  (loads its file systems)

        return True, ""
    except Exception as e:  # it fails to load on TensorFlow >= 2.18
        return False, f"tensorflow-io does not load here: {str(e).splitlines()[0][:200]}"


_io = []  # (loads, why), found once, when the first test that needs tensorflow-io runs


def pytest_runtest_setup(item):
    if not item.get_closest_marker("tensorflow_io"):
        return
    if not _io:
        _io.append(_tensorflow_io_loads())
    loads, why = _io[0]
    if not loads:
        pytest.skip(why)


@pytest.fixture
def other_user():
    """A second local user: `.name`, `.uid`, `.gid`, and `.run(argv)` running a command as that user.

    Files and folders "made by someone else" are made as root and handed over with `os.chown`
    (or `os.lchown` for a planted link), or made by `.run` itself.
    """
    if os.geteuid() != 0 or not shutil.which("useradd") or not shutil.which("runuser"):
        pytest.skip("needs root, useradd and runuser to make a second local user")
    name = "tfr" + secrets.token_hex(4)
    subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True,
                   capture_output=True, timeout=30)
    try:
        entry = pwd.getpwnam(name)

        def run(argv, **kwargs):
            kwargs.setdefault("capture_output", True)
            kwargs.setdefault("text", True)
            kwargs.setdefault("timeout", 60)
            return subprocess.run(["runuser", "-u", name, "--"] + list(argv), **kwargs)

        yield SimpleNamespace(name=name, uid=entry.pw_uid, gid=entry.pw_gid, run=run)
    finally:
        subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True, timeout=30)
        subprocess.run(["userdel", "--force", name], capture_output=True, timeout=30)


@contextlib.contextmanager
def _small_disks(make_folder):
    """Yields `mount(size, mode="0700")`; unmounts every tmpfs it mounted on the way out."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("needs root to mount a small tmpfs")
    mounted = []

    def mount(size, mode="0700"):
        folder = make_folder()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode={mode}", "tmpfs", str(folder)],
                       check=True, timeout=30)
        mounted.append(folder)
        return folder

    try:
        yield mount
    finally:
        for folder in mounted:
            subprocess.run(["umount", "-l", str(folder)], timeout=30)


@pytest.fixture
def small_disk(tmp_path_factory):
    with _small_disks(lambda: tmp_path_factory.mktemp("small")) as mount:
        yield mount


@pytest.fixture(scope="module")
def small_disk_for_module(tmp_path_factory):
    """As `small_disk`, mounted for a whole module (before a module-scoped fixture that needs it)."""
    with _small_disks(lambda: tmp_path_factory.mktemp("small")) as mount:
        yield mount
