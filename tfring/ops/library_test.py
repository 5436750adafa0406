"""Building and loading the op library: version records, automatic rebuild, clear errors."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import tensorflow as tf

from tfring.ops import _library
from tfring.ops import build


def test_build_info_records_the_tensorflow_version():
    _library.load()
    info = build.read_build_info(build.library_dir(tf.__version__))
    assert info["tensorflow"] == tf.__version__
    assert info["sources"] == build.source_digest()


def test_library_built_for_another_tensorflow_is_rebuilt_with_one_line(tmp_path):
    # A copy of the package whose library claims another TensorFlow version.
    pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(build.__file__))))
    copy = tmp_path / "src"
    shutil.copytree(os.path.join(pkg_root, "tfring"), copy / "tfring",
                    ignore=shutil.ignore_patterns("__pycache__", ".build.lock"))
    lib_dir = copy / "tfring" / "ops" / "lib" / ("tf" + tf.__version__)
    info_path = lib_dir / build.INFO_NAME
    info = json.loads(info_path.read_text())
    info["tensorflow"] = "0.0.1"
    info_path.write_text(json.dumps(info))
    code = "import tensorflow as tf, tfring; print(tfring.ops.allreduce(tf.constant([2.0])).numpy())"
    env = dict(os.environ, PYTHONPATH=str(copy), TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=str(copy), timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    notes = [l for l in proc.stderr.splitlines() if l.startswith("tfring:")]
    assert notes == [f"tfring: rebuilding the op library because it was built for TensorFlow 0.0.1, "
                     f"this is {tf.__version__}"]
    assert "[2.]" in proc.stdout
    assert json.loads(info_path.read_text())["tensorflow"] == tf.__version__


def test_unwritable_install_names_the_command(monkeypatch):
    monkeypatch.setattr(_library, "_needs_build", lambda v: "it was built for TensorFlow 0.0.1")
    monkeypatch.setattr(_library.os, "access", lambda path, mode: False)
    with pytest.raises(_library.LibraryError, match="pip install --no-build-isolation --force-reinstall"):
        _library._ensure_built(tf.__version__)
