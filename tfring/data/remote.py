"""Remote file systems (`s3://`, `hdfs://`, ...) through tensorflow-io, where it loads.

tensorflow-io 0.37.1 (the reference stack) provides them on TensorFlow 2.17; it does not load on
TensorFlow 2.18 or newer, where these paths fail with a clear error. tensorflow-io 0.37.1's S3
plugin also aborts the process at exit ("pure virtual method called", exit code 134;
tensorflow/io#2039): after a remote path is used, the exit is guarded so that the process
ends with the status it was going to end with.
"""

import atexit
import os
import sys

_SCHEMES_FROM_TFIO = ("s3", "hdfs", "viewfs", "har", "az", "http", "https")


def check_path(path):
    """Makes `path` usable: loads tensorflow-io for its scheme, or says why it cannot.

    Args:
        path: a local path or a URL-like path (`s3://bucket/prefix`).

    Raises:
        RuntimeError: the scheme needs tensorflow-io and it is unavailable here (named, with why).
    """
    path = str(path)
    if "://" not in path:
        return
    scheme = path.split("://", 1)[0].lower()
    if scheme not in _SCHEMES_FROM_TFIO:
        return  # gs:// and others TensorFlow serves itself
    import tensorflow as tf

    major, minor = (int(p) for p in tf.__version__.split(".")[:2])
    if (major, minor) >= (2, 18):
        raise RuntimeError(
            f"{scheme}:// paths need tensorflow-io, which is unavailable on TensorFlow {tf.__version__} "
            f"(tensorflow-io 0.37.1, the last release, does not load on TensorFlow 2.18 or newer). Use the "
            f"reference stack (TensorFlow 2.17.1 + tensorflow-io 0.37.1) or copy the data to a local path.")
    try:
        import tensorflow_io  # noqa: F401  (importing it registers the file systems)
    except Exception as e:
        raise RuntimeError(f"{scheme}:// paths need tensorflow-io: pip install tensorflow-io==0.37.1 ({e})") from e
    if scheme == "s3":
        _guard_exit()


class _ExitGuard:
    """Ends the process with os._exit(status) once Python's own shutdown work is done, before the
    S3 plugin's static destructors can abort it. The status: sys.exit's code, 1 after an uncaught
    exception, else 0."""

    def __init__(self):
        self.code = 0
        self._exit = sys.exit
        self._excepthook = sys.excepthook

    def exit(self, code=None):
        self.code = code
        self._exit(code)

    def excepthook(self, kind, value, tb):
        self.code = 1
        self._excepthook(kind, value, tb)

    def finish(self):
        code = self.code
        if code is None:
            code = 0
        elif not isinstance(code, int):
            code = 1  # sys.exit("message"): Python has printed it already
        import logging

        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


_guard = []


def _guard_exit():
    if _guard:
        return
    guard = _ExitGuard()
    sys.exit = guard.exit
    sys.excepthook = guard.excepthook
    # atexit runs handlers last-registered first; tfring's own shutdown registered before this
    # one would be skipped, so run it here first.
    atexit.register(guard.finish)
    from tfring import runtime

    atexit.register(runtime.shutdown)  # runs before guard.finish
    _guard.append(guard)
