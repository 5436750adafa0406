"""Test-suite rules shared by every test directory.

Markers (pytest.ini lists them):
- `multiprocess`: the test starts processes (a tfring job, mpirun, a child Python, a compiler). `make check`
  runs everything else, in under a minute. An unmarked test that starts a Python process, a
  `tfring` command or a launcher fails, saying to add the marker, so the fast loop stays fast.
- `tensorflow_io`: the test needs tensorflow-io, which loads on TensorFlow 2.17 only; elsewhere
  it is skipped, saying why.
"""

import os
import subprocess
import sys

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
