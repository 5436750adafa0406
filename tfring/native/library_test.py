"""Building and loading the op library: version records, automatic rebuild, clear errors."""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
import tensorflow as tf

from tfring.native import library as _library
from tfring.native import build


def test_build_info_records_the_tensorflow_version():
    _library.load()
    info = build.read_build_info(build.library_dir(tf.__version__))
    assert info["tensorflow"] == tf.__version__
    assert info["sources"] == build.source_digest()


def _claim_version(library, version):
    """Rewrites the TensorFlow version in a library's build info in place (same length: the
    binary stays intact) and returns the version it now claims."""
    data = library.read_bytes()
    old = f'"tensorflow": "{tf.__version__}"'.encode()
    new = f'"tensorflow": "{version.ljust(len(tf.__version__), "0")[:len(tf.__version__)]}"'.encode()
    assert data.count(old) == 1
    library.write_bytes(data.replace(old, new))
    return new.decode().split('"')[3]


@pytest.mark.multiprocess
@pytest.mark.extended  # a full build (~60 s); make test-install builds on first use in a fresh environment
def test_library_built_for_another_tensorflow_is_rebuilt_with_one_line(tmp_path):
    # A copy of the package whose library claims another TensorFlow version.
    pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(build.__file__))))
    copy = tmp_path / "src"
    shutil.copytree(os.path.join(pkg_root, "tfring"), copy / "tfring",
                    ignore=shutil.ignore_patterns("__pycache__", ".build.lock"))
    lib_dir = build.library_dir(tf.__version__, str(copy / "tfring" / "native"))
    claimed = _claim_version(pathlib.Path(lib_dir) / build.LIBRARY_NAME, "0.0.")
    assert build.read_build_info(lib_dir)["tensorflow"] == claimed
    code = "import tensorflow as tf, tfring; print(tfring.ops.allreduce(tf.constant([2.0])).numpy())"
    env = dict(os.environ, PYTHONPATH=str(copy), TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=str(copy), timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    notes = [l for l in proc.stderr.splitlines() if l.startswith("tfring:")]
    assert notes == [f"tfring: building the op library because it was built for TensorFlow {claimed}, "
                     f"this is {tf.__version__} (once, about a minute)"]
    assert "[2.]" in proc.stdout
    assert build.read_build_info(lib_dir)["tensorflow"] == tf.__version__


def test_the_library_carries_what_it_was_built_for():
    # In the binary itself (read without loading it): a copied library cannot lie by its folder.
    _library.load()
    info = build.read_build_info(build.library_dir(tf.__version__))
    assert {k: info[k] for k in ("tensorflow", "cuda", "cxx11_abi")} == build.tensorflow_identity()
    assert info["cxx11_abi"] == tf.sysconfig.CXX11_ABI_FLAG
    wanted = build.tensorflow_identity()
    assert build.mismatch(info, wanted) is None
    assert build.mismatch(dict(info, cxx11_abi=1 - info["cxx11_abi"]), wanted) == (
        f"it was built for TensorFlow {tf.__version__} with _GLIBCXX_USE_CXX11_ABI = {1 - info['cxx11_abi']}, "
        f"this TensorFlow {tf.__version__} has {info['cxx11_abi']}")
    assert "the CUDA build of TensorFlow" in build.mismatch(dict(info, cuda=not info["cuda"]), wanted)
    assert build.read_build_info("/nonexistent") is None


def test_a_library_tensorflow_cannot_load_raises_one_error_naming_both_and_the_fix(tmp_path):
    # An undefined symbol, as a library built against another TensorFlow's ABI has.
    source = tmp_path / "lib.cc"
    source.write_text("void tensorflow_symbol_of_another_version();\nvoid call() { tensorflow_symbol_of_another_version(); }\n")
    library = tmp_path / build.LIBRARY_NAME
    subprocess.run(["g++", "-shared", "-fPIC", str(source), "-o", str(library)], check=True)
    with pytest.raises(_library.LibraryError) as raised:
        _library._load_op_library(tf, str(library))
    message = str(raised.value)
    assert f"TensorFlow {tf.__version__} cannot load tfring's op library {library}" in message
    assert "undefined symbol" in message and "tfring.native.build" in message


def test_no_compiler_names_the_package_to_install(monkeypatch):
    monkeypatch.setattr(_library, "_needs_build", lambda v: "it was built for TensorFlow 0.0.1, this is 2")
    monkeypatch.setattr(build.shutil, "which", lambda name: None)
    with pytest.raises(_library.LibraryError, match="apt-get install g[+][+]") as raised:
        _library._ensure_built(tf.__version__)
    assert "it was built for TensorFlow 0.0.1" in str(raised.value) and "g++ (C++17) was not found" in str(raised.value)


def test_error_codes_are_named_by_the_core():
    # The C API returns these values (0 = OK); Python maps the names, never the numbers.
    names = [_library.error_name(code) for code in range(6)]
    assert names == ["OK", "INVALID_ARGUMENT", "UNAVAILABLE", "DEADLINE_EXCEEDED", "FAILED_PRECONDITION", "INTERNAL"]
    assert _library.error_name(6) == _library.error_name(-1) == "UNKNOWN"


def test_unwritable_install_names_the_command(monkeypatch):
    monkeypatch.setattr(_library, "_needs_build", lambda v: "it was built for TensorFlow 0.0.1")
    monkeypatch.setattr(_library.os, "access", lambda path, mode: False)
    with pytest.raises(_library.LibraryError, match="it was built for TensorFlow 0.0.1, and .* is not writable. "
                                                    "Build it as a user who can write there: .* -m tfring.native.build"):
        _library._ensure_built(tf.__version__)


def test_cpu_tensorflow_builds_without_gpu_kernels_and_says_why():
    _library.load()
    info = build.read_build_info(build.library_dir(tf.__version__))
    if tf.test.is_built_with_cuda():
        pytest.skip("a GPU build of TensorFlow: the GPU kernels are built where nvcc is")
    assert info["gpu"] is False and info["gpu_note"] == "this TensorFlow is not built with CUDA"
    assert _library.has_gpu_kernels() is False


def test_gpu_toolchain_needs_a_cuda_tensorflow_nvcc_and_its_headers(monkeypatch, tmp_path):
    assert build.gpu_toolchain(False) == (None, None, "this TensorFlow is not built with CUDA")
    monkeypatch.setattr(build, "find_nvcc", lambda: None)
    assert "nvcc was not found" in build.gpu_toolchain(True)[2]
    # An nvcc whose toolkit has no headers (and no CUDA_HOME that has them) is refused too.
    fake = tmp_path / "bin" / "nvcc"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setattr(build, "find_nvcc", lambda: str(fake))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "nowhere"))
    monkeypatch.setattr(build.os.path, "isfile", lambda p: p == str(fake))
    assert "CUDA headers" in build.gpu_toolchain(True)[2]
    # With headers beside it, that toolkit is used.
    monkeypatch.undo()
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "cuda_runtime.h").write_text("")
    monkeypatch.setattr(build, "find_nvcc", lambda: str(fake))
    assert build.gpu_toolchain(True) == (str(fake), str(tmp_path), None)


@pytest.mark.extended  # make test-gpu-build compiles the same glue, in the whole library, against TF's GPU build
def test_gpu_kernels_compile_against_this_tensorflow_where_nvcc_is():
    # The GOOGLE_CUDA glue (collective_kernels_gpu.cc, lars_kernel_gpu.cc) must compile against the
    # installed TensorFlow's headers; this needs only the CUDA headers, not a GPU.
    if build.find_nvcc() is None or build.cuda_root(build.find_nvcc()) is None:
        pytest.skip("no nvcc (and CUDA headers) on this machine")
    assert build.check_gpu_glue() == 2


@pytest.mark.multiprocess
@pytest.mark.extended  # a second full build (~45 s); the rebuild test above builds once in make test
def test_build_says_what_it_builds_in_one_line(tmp_path, capfd):
    target = build.build(base=str(tmp_path), jobs=2)
    lines = [l for l in capfd.readouterr().err.splitlines() if l.startswith("tfring:")]
    # Besides the one line, only the warning about an nvcc of another CUDA than TensorFlow's.
    lines = [l for l in lines if not l.startswith("tfring: warning: nvcc is CUDA")]
    assert len(lines) == 1, lines
    if tf.test.is_built_with_cuda() and build.find_nvcc():
        assert "with the GPU kernels" in lines[0]
    else:
        assert lines[0].startswith(f"tfring: building the op library for TensorFlow {tf.__version__} (")
        assert "CPU only: " in lines[0]
    assert os.path.exists(target) and build.read_build_info(os.path.dirname(target))["tensorflow"] == tf.__version__
