"""`tfring.run(fn, np=2)`: runs a Python function as a job of local processes (Horovod's `horovod.run`).

For notebooks and tests: the function and its arguments travel to the ranks as a cloudpickle file
in a private temporary directory on this host (never over the network), `tfring run` starts and
supervises the ranks, and each rank leaves its return value or its exception there.
"""

import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import threading

from tfring.launch import function_rank


class RankFailedError(RuntimeError):
    """A rank of `tfring.run` failed without an exception of its own to re-raise (it was killed, or
    `tfring run` stopped it when another rank failed). `returncode` is the launcher's exit code."""

    def __init__(self, message, returncode):
        super().__init__(message)
        self.returncode = returncode


class RemoteTraceback(Exception):
    """The traceback of a rank's exception, as text; set as the re-raised exception's `__cause__`."""

    def __str__(self):
        return self.args[0]


def _dump_call(directory, fn, args, kwargs):
    try:
        import cloudpickle
    except ImportError:
        raise ImportError("tfring.run needs cloudpickle to send the function to the ranks: "
                          "pip install cloudpickle (or tfring[run])") from None
    with open(function_rank.call_path(directory), "wb") as f:
        cloudpickle.dump((fn, tuple(args), dict(kwargs or {})), f)


def _relay(stream, sink):
    for line in iter(stream.readline, ""):
        sink.write(line)
        sink.flush()


def _launch(directory, np, env, timeout, launcher_args):
    """Runs the ranks under `tfring run`, relaying their output to this process's stdout/stderr
    (a notebook shows it); returns the launcher's exit code."""
    # This host only (the call's directory is private to it), even inside a PBS/LSF allocation.
    where = [] if {"-H", "--hostfile"} & set(launcher_args) else ["-H", f"localhost:{np}"]
    cmd = [sys.executable, "-m", "tfring", "run", "-np", str(np), *where, *launcher_args,
           sys.executable, "-m", "tfring.launch.function_rank", directory]
    full_env = dict(os.environ, **(env or {}))
    # As multiprocessing's spawn does: the ranks import what this process can (a function defined
    # in an importable module travels by name).
    full_env["PYTHONPATH"] = os.pathsep.join([p for p in sys.path if p] + [full_env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = subprocess.Popen(cmd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            errors="replace")
    relays = [threading.Thread(target=_relay, args=(proc.stdout, sys.stdout), daemon=True),
              threading.Thread(target=_relay, args=(proc.stderr, sys.stderr), daemon=True)]
    for t in relays:
        t.start()
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()  # the ranks exit when their launcher's pipe closes
        proc.wait()
        raise TimeoutError(f"tfring.run: the {np} ranks did not finish within {timeout} s; they were stopped")
    except BaseException:  # KeyboardInterrupt (a notebook's stop button): stop the job too
        proc.kill()
        proc.wait()
        raise
    finally:
        for t in relays:
            t.join(5)
    return code


def _load(path):
    with open(path, "rb") as f:
        return pickle.load(f)


def _raise_error(path, rank, np):
    cause = None
    try:
        error, text = _load(path)
    except Exception as e:  # the rank's exception does not unpickle here (say, its class is gone)
        error, text, cause = RuntimeError(f"rank {rank} raised an exception that cannot be rebuilt here: {e}"), "", e
    raise error from (RemoteTraceback(f"\n(rank {rank} of {np})\n{text}") if text else cause)


def _results(directory, np, code):
    """The return values by rank, or raises the lowest failing rank's exception."""
    for rank in range(np):
        path = function_rank.error_path(directory, rank)
        if os.path.exists(path):
            _raise_error(path, rank, np)
    missing = [r for r in range(np) if not os.path.exists(function_rank.result_path(directory, r))]
    if missing:
        raise RankFailedError(f"tfring.run: rank {missing[0]} of {np} ended without a result "
                              f"(tfring run exited with code {code}; its output above says why)", code)
    if code != 0:
        raise RankFailedError(f"tfring.run: every rank returned, but tfring run exited with code {code} "
                              "(its output above says why)", code)
    return [_load(function_rank.result_path(directory, r)) for r in range(np)]


def run(fn, np=2, args=(), kwargs=None, env=None, timeout=None, launcher_args=()):
    """Runs `fn(*args, **kwargs)` in `np` processes on this host as one tfring job.

    Each process is a rank (`tfring.rank()` tells which); `fn` typically builds a model under
    `tfring.RingStrategy()` and trains it. The ranks' output is relayed here as `tfring run` shows
    it: rank 0's stdout and every rank's stderr, prefixed by rank (`launcher_args=["--all-output"]`
    for every rank's stdout). The ranks run on this host, even inside a PBS or LSF allocation.

    Args:
        fn: a function; it and its arguments must be serialisable with cloudpickle (a lambda or a
            function defined in a notebook is).
        np: the number of processes.
        args, kwargs: what `fn` is called with, the same on every rank.
        env: extra environment variables for the ranks.
        timeout: seconds before the whole job is stopped (`TimeoutError`); None waits as long as it runs.
        launcher_args: more `tfring run` options, e.g. `["--timeout", "30"]`.

    Returns:
        The list of the ranks' return values, by rank.

    Raises:
        Exception: the exception `fn` raised on the lowest rank that raised one, re-raised here with
            that rank's traceback as its cause.
        RankFailedError: a rank ended without a result or an exception (killed, or stopped).
        TimeoutError: the job outlived `timeout`.

    Example:

    >>> import tfring
    >>> def train(scale):
    ...     import tfring
    ...     return tfring.rank() * scale
    >>> tfring.run(train, np=2, args=(10,))
    [0, 10]
    """
    if int(np) < 1:
        raise ValueError(f"np must be at least 1, got {np!r}")
    directory = tempfile.mkdtemp(prefix="tfring-run-")  # mode 0700: only this user reads the call
    try:
        _dump_call(directory, fn, args, kwargs)
        code = _launch(directory, int(np), env, timeout, list(launcher_args))
        return _results(directory, int(np), code)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
