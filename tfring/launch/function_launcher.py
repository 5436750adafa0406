"""`tfring.run(fn, np=2)`: runs a Python function as a job of local processes (Horovod's `horovod.run`).

For notebooks and tests: the function and its arguments travel to the ranks as a cloudpickle file
in a private temporary directory on this host (never over the network), `tfring run` starts and
supervises the ranks, and each rank leaves its return value or its exception there.

The job lives no longer than its caller: `tfring run` runs in a child process that gets SIGHUP
when the caller ends, even by SIGKILL (a notebook kernel killed), and then stops the ranks as on
SIGTERM and removes the directory.
"""

import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import threading

from tfring.launch import function_rank
from tfring.launch import local_rank

# Seconds `tfring run` has to stop the ranks when told to (SIGTERM) before it is killed: its grace
# for the ranks and for what they left running, and time to spare.
STOP_SECONDS = 15
# The job's process: the `tfring` command's main (`tfring run ...`) under `_job_main`, given the
# caller's pid, the call's directory and `tfring run`'s options.
_JOB = ("import importlib, sys; from tfring.cli import main; "
        "sys.exit(importlib.import_module('tfring.launch.function_launcher')._job_main(sys.argv[1:], main))")
_orphaned = False  # in the job's process: whether its caller has ended


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


def _caller_gone(_signum=None, _frame=None):
    """SIGHUP in the job's process: its caller ended. Nobody reads its output any more: drop it;
    stop the job as on SIGTERM (`tfring run`'s handler), and let `_job_main` remove the directory."""
    global _orphaned
    _orphaned = True
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(devnull)
    os.kill(os.getpid(), signal.SIGTERM)


def _exit_on_sigterm(signum, _frame):
    """SIGTERM in the job's process outside `tfring run` (which handles it itself): exit through
    `_job_main`'s cleanup rather than at once."""
    raise SystemExit(128 + signum)


def _job_main(argv, tfring_main):
    """The job's process: `tfring run ... <a function rank>`, tied to the caller's life.

    Args:
        argv: the caller's pid, the call's directory, then `tfring run`'s options.
        tfring_main: the `tfring` command's entry point (`tfring.cli.main`, a layer above this one).

    Returns:
        `tfring run`'s exit code.
    """
    caller, directory, run_args = int(argv[0]), argv[1], argv[2:]
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    signal.signal(signal.SIGHUP, _caller_gone)  # armed before the kernel may send it
    local_rank.signal_on_parent_death(signal.SIGHUP)
    try:
        if os.getppid() != caller:  # the caller ended before the line above
            _caller_gone()
        return tfring_main(["run", *run_args, *function_rank.command(directory)])
    finally:
        if _orphaned or os.getppid() != caller:  # nobody else will remove it
            shutil.rmtree(directory, ignore_errors=True)


def _stop(proc, signum):
    """Stops the job's process with `signum` (it stops the ranks and what they started), SIGKILL
    `STOP_SECONDS` later."""
    proc.send_signal(signum)
    try:
        proc.wait(STOP_SECONDS)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _launch(directory, np, env, timeout, launcher_args):
    """Runs the ranks under `tfring run`, relaying their output to this process's stdout/stderr
    (a notebook shows it); returns the launcher's exit code."""
    # This host only (the call's directory is private to it), even inside a PBS/LSF allocation.
    where = [] if {"-H", "--hostfile"} & set(launcher_args) else ["-H", f"localhost:{np}"]
    cmd = [sys.executable, "-c", _JOB, str(os.getpid()), directory, "-np", str(np), *where, *launcher_args]
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
        _stop(proc, signal.SIGTERM)
        raise TimeoutError(f"tfring.run: the {np} ranks did not finish within {timeout} s; they were stopped")
    except BaseException:  # KeyboardInterrupt (a notebook's stop button): stop the job too, as Ctrl-C does
        _stop(proc, signal.SIGINT)
        raise
    finally:
        for t in relays:
            t.join(5)
    return code


def _load(path):
    with open(path, "rb") as f:
        return pickle.load(f)


def _result(directory, rank):
    """Rank `rank`'s return value, unpickled here."""
    try:
        return _load(function_rank.result_path(directory, rank))
    except Exception as e:  # say, its class is in a module only the ranks can import
        raise pickle.UnpicklingError(f"rank {rank}'s result could not be unpickled in the caller: "
                                     f"{type(e).__name__}: {e}") from e


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
    return [_result(directory, r) for r in range(np)]


def run(fn, np=2, args=(), kwargs=None, env=None, timeout=None, launcher_args=()):
    """Runs `fn(*args, **kwargs)` in `np` processes on this host as one tfring job.

    Each process is a rank (`tfring.rank()` tells which); `fn` typically builds a model under
    `tfring.RingStrategy()` and trains it. The ranks' output is relayed here as `tfring run` shows
    it: rank 0's stdout and every rank's stderr, prefixed by rank (`launcher_args=["--all-output"]`
    for every rank's stdout). The ranks run on this host, even inside a PBS or LSF allocation.

    The job lives no longer than this call: what a rank started and left running when it exited is
    ended with the job (SIGTERM, then SIGKILL), and when this process ends (a notebook kernel
    killed, even by SIGKILL) `tfring run` stops the ranks and removes the call's directory. Only
    the rank process returns a value: a process `fn` forks that returns from `fn` too is ignored.

    Args:
        fn: a function; it and its arguments must be serialisable with cloudpickle (a lambda or a
            function defined in a notebook is).
        np: the number of processes.
        args: the positional arguments `fn` is called with, the same on every rank.
        kwargs: its keyword arguments, likewise.
        env: extra environment variables for the ranks.
        timeout: seconds before the whole job is stopped (`TimeoutError`); None waits as long as it runs.
        launcher_args: more `tfring run` options, e.g. `["--timeout", "30"]`.

    Returns:
        The list of the ranks' return values, by rank.

    Raises:
        Exception: the exception `fn` raised on the lowest rank that raised one, re-raised here with
            that rank's traceback as its cause.
        RankFailedError: a rank ended without a result or an exception (killed, or stopped).
        pickle.PicklingError: a rank's return value could not be pickled (the message names the rank).
        pickle.UnpicklingError: a rank's return value could not be unpickled here (say, its class
            lives in a module only the ranks import; the message names the rank).
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
