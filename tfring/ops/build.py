"""Compiles the tfring op library against the TensorFlow of this environment.

`python -m tfring.ops.build` rebuilds it by hand; setup.py and `import tfring` call `build()`.
The framework-free core is compiled without TensorFlow's include path (faster), but with its
C++ ABI flag so that both halves link into one library.
"""

import concurrent.futures
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CC_DIR = os.path.join(HERE, "cc")
LIBRARY_NAME = "_tfring_ops.so"
INFO_NAME = "_build_info.json"


def _sources():
    core = sorted(glob.glob(os.path.join(CC_DIR, "core", "*.cc")))
    kernels = sorted(glob.glob(os.path.join(CC_DIR, "kernels", "*.cc")))
    return core, kernels


def _tf_flags():
    import tensorflow as tf

    compile_flags = tf.sysconfig.get_compile_flags()
    link_flags = tf.sysconfig.get_link_flags()
    return tf.__version__, compile_flags, link_flags


def source_digest():
    """A digest of every C++ source and header, so edits trigger a rebuild."""
    h = hashlib.sha256()
    for path in sorted(glob.glob(os.path.join(CC_DIR, "**", "*"), recursive=True)):
        if path.endswith((".cc", ".h")) and "/tests/" not in path:
            h.update(os.path.relpath(path, CC_DIR).encode())
            with open(path, "rb") as f:
                h.update(f.read())
    return h.hexdigest()[:16]


def library_dir(tf_version, base=HERE):
    """Where the library for one TensorFlow version lives: one folder per version, so that
    environments with different TensorFlows can share a source checkout."""
    return os.path.join(base, "lib", "tf" + tf_version)


def read_build_info(directory):
    """Returns the recorded build info beside the library in `directory`, or None."""
    path = os.path.join(directory, INFO_NAME)
    if not os.path.exists(os.path.join(directory, LIBRARY_NAME)) or not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def build(base=HERE, verbose=True, jobs=None):
    """Builds `_tfring_ops.so` for the installed TensorFlow and records the version beside it.

    Args:
        base: the `tfring/ops` folder; the library goes to `base/lib/tf<version>/`.
        verbose: print one line per step.
        jobs: parallel compiler processes (default: the number of CPUs).

    Returns:
        The path of the built library.
    """
    tf_version, compile_flags, link_flags = _tf_flags()
    output_dir = library_dir(tf_version, base)
    abi = [f for f in compile_flags if f.startswith("-D_GLIBCXX_USE_CXX11_ABI")]
    base = ["g++", "-std=c++17", "-O3", "-fPIC", "-Wall", "-pthread"]
    core, kernels = _sources()
    jobs = jobs or os.cpu_count() or 2
    tmp = tempfile.mkdtemp(prefix="tfring-build-")

    def compile_one(src, flags):
        obj = os.path.join(tmp, os.path.basename(os.path.dirname(src)) + "_" + os.path.basename(src) + ".o")
        cmd = base + flags + ["-c", src, "-o", obj]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"compiling {src} failed:\n{' '.join(cmd)}\n{proc.stderr}")
        return obj

    if verbose:
        print(f"tfring: building the op library for TensorFlow {tf_version} "
              f"({len(core) + len(kernels)} files)", file=sys.stderr, flush=True)
    try:
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            futures = [pool.submit(compile_one, s, abi) for s in core]
            futures += [pool.submit(compile_one, s, compile_flags) for s in kernels]
            objects = [f.result() for f in futures]
        os.makedirs(output_dir, exist_ok=True)
        target = os.path.join(output_dir, LIBRARY_NAME)
        partial = target + f".tmp{os.getpid()}"
        cmd = base + ["-shared", "-o", partial] + objects + link_flags + ["-lrt"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"linking {LIBRARY_NAME} failed:\n{' '.join(cmd)}\n{proc.stderr}")
        os.replace(partial, target)  # atomic: a concurrent import never sees half a library
        info = {"tensorflow": tf_version, "sources": source_digest()}
        info_tmp = os.path.join(output_dir, INFO_NAME + f".tmp{os.getpid()}")
        with open(info_tmp, "w") as f:
            json.dump(info, f)
        os.replace(info_tmp, os.path.join(output_dir, INFO_NAME))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


if __name__ == "__main__":
    print(build())
