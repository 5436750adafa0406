"""Loads the compiled op library once, building it first when there is none for this TensorFlow, or
the one there was built for another TensorFlow, ABI or sources (its build info, `build.read_build_info`).
What cannot be built or loaded raises one `LibraryError` that names both sides and the command to run."""

import ctypes
import fcntl
import functools
import os
import sys

from tfring.native import build as _build

_loaded = None  # (tf op module, ctypes handle), set once per process


class LibraryError(ImportError):
    """The op library is missing or stale and could not be rebuilt here."""


def _needs_build(tf_version):
    return _build.why_not_usable(_build.library_dir(tf_version))


def _ensure_built(tf_version):
    reason = _needs_build(tf_version)
    if reason is None:
        return
    directory = _build.HERE
    if not os.access(directory, os.W_OK):
        raise LibraryError(
            f"tfring's op library cannot be used: {reason}, and {directory} is not writable. Build it as a user "
            f"who can write there: {sys.executable} -m tfring.native.build")
    # Several ranks may import at once: one builds, the others wait and then find it built.
    with open(os.path.join(directory, ".build.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        reason = _needs_build(tf_version)
        if reason is None:
            return
        try:
            _build.require_compiler()
        except RuntimeError as e:
            raise LibraryError(f"tfring must build its op library ({reason}) but has {e}") from None
        print(f"tfring: building the op library because {reason} (once, about a minute)", file=sys.stderr,
              flush=True)
        try:
            _build.build(verbose=False)
        except Exception as e:  # compiler errors carry their own detail
            raise LibraryError(f"tfring could not build its op library: {e}") from e


def _load_op_library(tf, path):
    """tf.load_op_library, whose failures (an undefined symbol: a library of another TensorFlow
    ABI) become one LibraryError naming both sides and the command that rebuilds it."""
    try:
        return tf.load_op_library(path)
    except (tf.errors.NotFoundError, OSError) as e:
        info = _build.read_build_info(os.path.dirname(path)) or {}
        detail = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise LibraryError(
            f"TensorFlow {tf.__version__} cannot load tfring's op library {path} (built for TensorFlow "
            f"{info.get('tensorflow', '?')}, _GLIBCXX_USE_CXX11_ABI = {info.get('cxx11_abi', '?')}): {detail}. "
            f"Rebuild it: {sys.executable} -m tfring.native.build") from None


def load():
    """Returns `(ops_module, cdll)`: the TF op wrappers and the C API of the same library."""
    global _loaded
    if _loaded is None:
        import tensorflow as tf

        _ensure_built(tf.__version__)
        path = os.path.join(_build.library_dir(tf.__version__), _build.LIBRARY_NAME)
        ops_module = _load_op_library(tf, path)
        # The same file: dlopen hands back the library TF loaded, so both share one runtime.
        cdll = ctypes.CDLL(path)
        _declare(cdll)
        _loaded = (ops_module, cdll)
    return _loaded


@functools.lru_cache(maxsize=None)
def has_gpu_kernels():
    """True when the loaded op library was built with its GPU kernels (see `tfring.native.build`).

    Read once per process: LARS asks for every GPU variable it traces.

    Returns:
        bool; the library is loaded (and built if needed) first.
    """
    import tensorflow as tf

    load()
    info = _build.read_build_info(_build.library_dir(tf.__version__)) or {}
    return bool(info.get("gpu"))


def error_name(code):
    """The name of an error code the C API returned: "OK", "INVALID_ARGUMENT", "UNAVAILABLE",
    "DEADLINE_EXCEEDED", "FAILED_PRECONDITION", "INTERNAL"; "UNKNOWN" for any other value.

    The codes are defined once, in the core (`cc/core/error_code.h`); Python maps names, never
    numbers, to exception classes.

    Args:
        code: an int returned by `tfring_init`, `tfring_allreduce_raw` or `tfring_barrier_raw`
            (0 is OK).

    Returns:
        str; the library is loaded (and built if needed) first.
    """
    return load()[1].tfring_error_name(int(code)).decode()


def host_identity():
    """This host's identity as the core detects it: hostname, boot id and network namespace.

    Ranks whose identities are equal count as one host and may share memory; ranks in different
    network namespaces of one machine count as different hosts. The setting `host_id`
    (`TFRING_HOST_ID`) replaces detection; this function shows what detection finds.

    Returns:
        str, "hostname/boot id/net:[inode]"; the library is loaded (and built if needed) first.
    """
    buf = ctypes.create_string_buffer(1024)
    load()[1].tfring_host_identity(buf, len(buf))
    return buf.value.decode()


def _declare(c):
    # Calls that can fail return a code (0 = OK) and write the message into the buffer passed last.
    c.tfring_error_name.argtypes = [ctypes.c_int]
    c.tfring_error_name.restype = ctypes.c_char_p
    c.tfring_init.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    c.tfring_init.restype = ctypes.c_int
    c.tfring_shutdown.restype = None
    c.tfring_initialized.restype = ctypes.c_int
    c.tfring_topology.argtypes = [ctypes.POINTER(ctypes.c_int)] * 4
    c.tfring_transport_name.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    c.tfring_host_identity.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    c.tfring_host_identity.restype = None
    c.tfring_allreduce_raw.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
                                       ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int64),
                                       ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
    c.tfring_barrier_raw.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    c.tfring_traffic.argtypes = [ctypes.POINTER(ctypes.c_int64)] * 3 + [ctypes.c_int]
    c.tfring_traffic.restype = ctypes.c_int
    c.tfring_sign_object.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p]
    c.tfring_sign_object.restype = ctypes.c_int
    c.tfring_add_process_set.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.POINTER(ctypes.c_int),
                                         ctypes.c_char_p, ctypes.c_size_t]
    c.tfring_remove_process_set.argtypes = [ctypes.c_int]
    c.tfring_process_set_id.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int]
    c.tfring_process_set_ranks.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.c_int,
                                           ctypes.POINTER(ctypes.c_int), ctypes.c_char_p, ctypes.c_size_t]
