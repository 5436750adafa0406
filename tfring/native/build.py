"""Compiles the tfring op library against the TensorFlow of this environment.

`python -m tfring.native.build` rebuilds it by hand; setup.py and `import tfring` call `build()`.
The framework-free core is compiled without TensorFlow's include path (faster), but with its
C++ ABI flag so that both halves link into one library.

The library carries what it was built for inside the binary (`BUILD_INFO_MARK` then JSON: the
TensorFlow version and flavour, its C++ ABI flag, the sources' digest, the GPU kernels), so that
a library copied or left behind is never loaded into a TensorFlow it does not match:
`read_build_info` reads it from the file without loading it.
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
# Precedes the build info's JSON in the library's read-only data (see `_build_info_source`).
BUILD_INFO_MARK = b"TFRING_BUILD_INFO:"
# What a machine without a C++ compiler is told to install, by system.
COMPILER_PACKAGES = "Debian/Ubuntu: apt-get install g++; Fedora/RHEL: dnf install gcc-c++; conda: conda install gxx"
CORE_DIR = os.path.join(CC_DIR, "core")
# Every core header is included by its path under core/ (`#include "rendezvous/store.h"`), from the
# core, the TF kernels and the CUDA code alike. -iquote (not -I) so that TensorFlow's own
# `#include <...>` never finds a core header of the same name.
CORE_INCLUDE = ["-iquote", CORE_DIR]


def core_rooms():
    """The folders of the framework-free core's library, relative to `cc/`: `core` and each of its
    subfolders (rendezvous, transport, algorithms, engine), never `core/tests`.

    The one list of them: `build()` compiles their `.cc` files, setup.py ships their sources with
    the package, and the Makefile's C++ core tests compile them (`python tfring/native/build.py
    --core-rooms` prints them).
    """
    subfolders = sorted(name for name in os.listdir(CORE_DIR)
                        if name != "tests" and os.path.isdir(os.path.join(CORE_DIR, name)))
    return ["core"] + ["core/" + name for name in subfolders]


def _sources():
    """(core, CPU kernels, GPU kernels, CUDA kernels) source files; the core's come from
    `core_rooms()`, never from its tests."""
    core = sorted(p for room in core_rooms() for p in glob.glob(os.path.join(CC_DIR, room, "*.cc")))
    kernels = sorted(glob.glob(os.path.join(CC_DIR, "kernels", "*.cc")))
    gpu_kernels = [k for k in kernels if k.endswith("_gpu.cc")]
    cuda = sorted(glob.glob(os.path.join(CC_DIR, "cuda", "*.cu")))
    return core, [k for k in kernels if k not in gpu_kernels], gpu_kernels, cuda


def find_nvcc():
    """The nvcc to use: on PATH, else $CUDA_HOME/bin/nvcc, else /usr/local/cuda/bin/nvcc; None if none."""
    for candidate in (shutil.which("nvcc"), os.path.join(os.environ.get("CUDA_HOME", ""), "bin", "nvcc"),
                      "/usr/local/cuda/bin/nvcc"):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def gpu_toolchain(built_with_cuda):
    """`(nvcc, cuda_root, None)` when the GPU kernels can be built here, else `(None, None, reason)`.

    They are built where TensorFlow itself was built with CUDA and nvcc is present; elsewhere the
    library is CPU-only (tensorflow-cpu, or no CUDA toolkit).
    """
    if not built_with_cuda:
        return None, None, "this TensorFlow is not built with CUDA"
    nvcc = find_nvcc()
    if nvcc is None:
        return None, None, "nvcc was not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)"
    root = cuda_root(nvcc)
    if root is None:
        return None, None, f"the CUDA headers of {nvcc} were not found (set CUDA_HOME)"
    return nvcc, root, None


def cuda_root(nvcc):
    """The CUDA toolkit folder (holding include/cuda_runtime.h) that goes with `nvcc`, or None.
    nvcc may be a wrapper script elsewhere, so $CUDA_HOME and /usr/local/cuda are tried too."""
    for root in (os.path.dirname(os.path.dirname(os.path.realpath(nvcc))), os.environ.get("CUDA_HOME", ""),
                 "/usr/local/cuda"):
        if root and os.path.isfile(os.path.join(root, "include", "cuda_runtime.h")):
            return root
    return None


# PTX for Turing and newer (JIT-compiled by the driver), machine code for Ampere and Hopper.
CUDA_GENCODE = ["-gencode=arch=compute_75,code=compute_75", "-gencode=arch=compute_80,code=sm_80",
                "-gencode=arch=compute_90,code=sm_90"]


def _system_includes(flags):
    # TF's headers as system headers: their own warnings (absl's CHECK macros redefining TF's) are
    # not ours to see.
    return [("-isystem" + f[2:]) if f.startswith("-I") else f for f in flags]


def check_gpu_glue(nvcc=None):
    """Compiles the TF GPU kernels (GOOGLE_CUDA) for syntax only, against this TensorFlow's headers.

    Lets a machine without a GPU TensorFlow (CI) check that the GPU glue compiles; it needs only
    the CUDA headers. Returns the number of files checked (0 without nvcc and its headers).
    """
    _, compile_flags, _ = _tf_flags()
    nvcc = nvcc or find_nvcc()
    root = cuda_root(nvcc) if nvcc else None
    if root is None:
        return 0
    include = os.path.join(root, "include")
    _, _, gpu_kernels, _ = _sources()
    for src in gpu_kernels:
        cmd = ["g++", "-std=c++17", "-fsyntax-only", "-Wall", "-DGOOGLE_CUDA=1", "-isystem", include] + CORE_INCLUDE
        cmd += _system_includes(compile_flags) + [src]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"checking {src} failed:\n{' '.join(cmd)}\n{proc.stderr}")
    return len(gpu_kernels)


def _tf_flags():
    import tensorflow as tf

    compile_flags = tf.sysconfig.get_compile_flags()
    link_flags = tf.sysconfig.get_link_flags()
    return tf.__version__, compile_flags, link_flags


def _built_with_cuda():
    import tensorflow as tf

    return tf.test.is_built_with_cuda()


def cuda_version_note(nvcc):
    """A warning when nvcc's CUDA major version differs from the one TensorFlow was built with
    (kernels then run under TensorFlow's CUDA runtime, which may refuse them), else None."""
    import re

    import tensorflow as tf

    wanted = str(tf.sysconfig.get_build_info().get("cuda_version", ""))
    proc = subprocess.run([nvcc, "--version"], capture_output=True, text=True)
    found = re.search(r"release (\d+)\.(\d+)", proc.stdout)
    if not wanted or not found or wanted.split(".")[0] == found.group(1):
        return None
    return (f"warning: nvcc is CUDA {found.group(1)}.{found.group(2)} but TensorFlow {tf.__version__} was built with "
            f"CUDA {wanted}; if the GPU kernels fail to load or launch, build with an nvcc of CUDA {wanted}")


def source_digest():
    """A digest of every C++ source and header, so edits trigger a rebuild."""
    h = hashlib.sha256()
    for path in sorted(glob.glob(os.path.join(CC_DIR, "**", "*"), recursive=True)):
        if path.endswith((".cc", ".h", ".cu", ".cuh")) and "/tests/" not in path:
            h.update(os.path.relpath(path, CC_DIR).encode())
            with open(path, "rb") as f:
                h.update(f.read())
    return h.hexdigest()[:16]


def library_dir(tf_version, base=HERE):
    """Where the library for one TensorFlow lives: one folder per version and flavour (a GPU build
    of TensorFlow gets `-cuda`), so that environments with different TensorFlows can share a source
    checkout."""
    return os.path.join(base, "lib", "tf" + tf_version + ("-cuda" if _built_with_cuda() else ""))


def read_build_info(directory):
    """What the library in `directory` was built for, read from the binary without loading it.

    Args:
        directory: a folder returned by `library_dir`.

    Returns:
        dict with "tensorflow" (version), "cuda" (a CUDA build of TensorFlow), "cxx11_abi"
        (TensorFlow's `_GLIBCXX_USE_CXX11_ABI`), "sources" (`source_digest()` of what was
        compiled), "gpu" (the GPU kernels are in) and "gpu_note"; None when there is no library,
        or it carries no build info (built by a tfring before 0.4).
    """
    path = os.path.join(directory, LIBRARY_NAME)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    start = data.find(BUILD_INFO_MARK)
    if start < 0:
        return None
    start += len(BUILD_INFO_MARK)
    try:
        return json.loads(data[start:data.index(b"\0", start)].decode())
    except ValueError:
        return None


def tensorflow_identity():
    """What a library must have been built for to load into this TensorFlow: the part of the
    build info (`read_build_info`) that must match, as a dict."""
    import tensorflow as tf

    return {"tensorflow": tf.__version__, "cuda": _built_with_cuda(), "cxx11_abi": int(tf.sysconfig.CXX11_ABI_FLAG)}


def mismatch(info, wanted):
    """Why a library built for `info` (`read_build_info`) cannot serve the TensorFlow `wanted`
    (`tensorflow_identity()`) with these sources, or None when it can."""
    if info.get("tensorflow") != wanted["tensorflow"]:
        return f"it was built for TensorFlow {info.get('tensorflow')}, this is {wanted['tensorflow']}"
    for key, what in (("cuda", "the CUDA build of TensorFlow"), ("cxx11_abi", "_GLIBCXX_USE_CXX11_ABI")):
        if info.get(key) != wanted[key]:
            return (f"it was built for TensorFlow {info.get('tensorflow')} with {what} = {info.get(key)}, "
                    f"this TensorFlow {wanted['tensorflow']} has {wanted[key]}")
    if info.get("sources") != source_digest():
        return "its C++ sources changed since it was built"
    return None


def why_not_usable(directory):
    """Why the library in `directory` cannot be loaded into this TensorFlow ("it has not been built
    yet", "it was built for TensorFlow 2.17.1, this is 2.21.0", ...), or None when it can."""
    info = read_build_info(directory)
    return "it has not been built yet" if info is None else mismatch(info, tensorflow_identity())


def _build_info_source(info):
    """A C++ file whose one constant is `info` as JSON after BUILD_INFO_MARK (see `read_build_info`)."""
    text = (BUILD_INFO_MARK.decode() + json.dumps(info, sort_keys=True)).replace("\\", "\\\\").replace('"', '\\"')
    return ('// Generated by tfring/native/build.py: what this library was built for.\n'
            f'extern "C" __attribute__((visibility("default"), used)) const char tfring_build_info[] = "{text}";\n')


def find_compiler():
    """The C++ compiler `build()` runs: the path of g++ on PATH, or None."""
    return shutil.which("g++")


def require_compiler():
    """Raises RuntimeError naming the package to install when there is no g++ on PATH."""
    if find_compiler() is None:
        raise RuntimeError(f"no C++ compiler: g++ (C++17) was not found on PATH. Install it ({COMPILER_PACKAGES})")


def build(base=HERE, verbose=True, jobs=None):
    """Builds `_tfring_ops.so` for the installed TensorFlow, with what it was built for inside it.

    Args:
        base: the `tfring/native` folder; the library goes to `base/lib/tf<version>/`.
        verbose: print one line per step.
        jobs: parallel compiler processes (default: the number of CPUs).

    Returns:
        The path of the built library.
    """
    require_compiler()
    tf_version, compile_flags, link_flags = _tf_flags()
    compile_flags = _system_includes(compile_flags)
    output_dir = library_dir(tf_version, base)
    abi = [f for f in compile_flags if f.startswith("-D_GLIBCXX_USE_CXX11_ABI")]
    base = ["g++", "-std=c++17", "-O3", "-fPIC", "-Wall", "-pthread"]
    core, kernels, gpu_kernels, cuda = _sources()
    nvcc, cuda_home, no_gpu = gpu_toolchain(_built_with_cuda())
    jobs = jobs or os.cpu_count() or 2
    tmp = tempfile.mkdtemp(prefix="tfring-build-")

    def compile_one(src, flags, compiler=None):
        # Named by the path under cc/, so that core/engine/engine.cc and a kernels/engine.cc never collide.
        obj = os.path.join(tmp, os.path.relpath(src, CC_DIR).replace(os.sep, "_") + ".o")
        cmd = (compiler or base) + flags + ["-c", src, "-o", obj]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"compiling {src} failed:\n{' '.join(cmd)}\n{proc.stderr}")
        return obj

    version_note = cuda_version_note(nvcc) if nvcc else None
    info = dict(tensorflow_identity(), sources=source_digest(), gpu=bool(nvcc),
                gpu_note=(version_note or f"built with {nvcc}") if nvcc else no_gpu)
    info_source = os.path.join(tmp, "build_info.cc")
    with open(info_source, "w") as f:
        f.write(_build_info_source(info))
    if verbose:
        if version_note:
            print(f"tfring: {version_note}", file=sys.stderr, flush=True)
        gpu = f"with the GPU kernels ({nvcc})" if nvcc else f"CPU only: {no_gpu}"
        print(f"tfring: building the op library for TensorFlow {tf_version} "
              f"({len(core) + len(kernels) + (len(gpu_kernels) + len(cuda) if nvcc else 0)} files, {gpu})",
              file=sys.stderr, flush=True)
    try:
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            futures = [pool.submit(compile_one, s, abi + CORE_INCLUDE) for s in core + [info_source]]
            futures += [pool.submit(compile_one, s, compile_flags + CORE_INCLUDE) for s in kernels]
            gpu_link = []
            if nvcc:
                cuda_include = ["-isystem", os.path.join(cuda_home, "include")]
                nvcc_cmd = [nvcc, "-std=c++17", "-O3", "-Xcompiler", "-fPIC,-Wall"] + CUDA_GENCODE
                # nvcc has no -iquote; the CUDA sources include no TensorFlow header, so -I is safe.
                futures += [pool.submit(compile_one, s, abi + ["-I", CORE_DIR], nvcc_cmd) for s in cuda]
                gpu_flags = compile_flags + CORE_INCLUDE + ["-DGOOGLE_CUDA=1"] + cuda_include
                futures += [pool.submit(compile_one, s, gpu_flags) for s in gpu_kernels]
                gpu_link = ["-L" + os.path.join(cuda_home, "lib64"), "-lcudart"]
            objects = [f.result() for f in futures]
        os.makedirs(output_dir, exist_ok=True)
        target = os.path.join(output_dir, LIBRARY_NAME)
        partial = target + f".tmp{os.getpid()}"
        cmd = base + ["-shared", "-o", partial] + objects + link_flags + gpu_link + ["-lrt"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"linking {LIBRARY_NAME} failed:\n{' '.join(cmd)}\n{proc.stderr}")
        os.replace(partial, target)  # atomic: a concurrent import never sees half a library
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


if __name__ == "__main__":
    if sys.argv[1:] == ["--core-rooms"]:
        print(" ".join(core_rooms()))
    elif sys.argv[1:] == ["--check-gpu-glue"]:
        n = check_gpu_glue()
        print(f"tfring: the TF GPU kernels compile (GOOGLE_CUDA, {n} files)" if n else
              "tfring: no nvcc here: the TF GPU kernels were not checked")
    else:
        print(build())
