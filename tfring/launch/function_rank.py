"""One rank of `tfring.run(fn)`: `command(DIR)` loads the function from DIR, runs it, and leaves its
return value (or its exception and traceback) there for the caller. Only the rank process itself
leaves one: a process `fn` forked that returns from it too is not the rank.

DIR is a private directory (mode 0700) the caller made on this host; nothing is ever read from the
network.
"""

import os
import pickle
import sys
import traceback

from tfring.launch import variables


def command(directory):
    """The command line of a rank: `main(directory)` in a fresh Python.

    Not `python -m tfring.launch.function_rank`: importing the `tfring` package imports this module
    (through `tfring.run`) before runpy executes it, and runpy warns about that on every rank. The
    module's full name stays on the command line, for `ps` and `pgrep -f`.

    Args:
        directory: the call's directory.

    Returns:
        A list of program and arguments.
    """
    return [sys.executable, "-c", "import importlib, sys; "
            "sys.exit(importlib.import_module('tfring.launch.function_rank').main(sys.argv[1]))", directory]


def call_path(directory):
    """Where the caller leaves the pickled (fn, args, kwargs)."""
    return os.path.join(directory, "call.pkl")


def result_path(directory, rank):
    """Where rank `rank` leaves its pickled return value."""
    return os.path.join(directory, f"result.{rank}")


def error_path(directory, rank):
    """Where rank `rank` leaves its pickled (exception, traceback text)."""
    return os.path.join(directory, f"error.{rank}")


def _dumps(value):
    """cloudpickle where it is installed (it pickles classes defined in a notebook), else pickle."""
    try:
        import cloudpickle
    except ImportError:
        return pickle.dumps(value)
    return cloudpickle.dumps(value)


def _write(path, data):
    """Writes the bytes `data` to `path` atomically (a reader never sees half a file)."""
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.replace(path + ".tmp", path)


def _write_error(directory, rank, error, text):
    """Leaves `error` and the traceback `text` for the caller, and shows the traceback here."""
    _write(error_path(directory, rank), _dumps((_travelling(error), text)))
    sys.stderr.write(text)


def _travelling(e):
    """`e` if it survives a round trip through pickle, else a RuntimeError that says what it was."""
    try:
        pickle.loads(_dumps(e))
        return e
    except Exception:
        return RuntimeError(f"{type(e).__name__}: {e}")


def main(directory):
    """Runs the pickled call in `directory` and writes `result.<rank>` or `error.<rank>` beside it.

    Returns:
        The process's exit code: 0, or 1 when the function raised or its value cannot be pickled.
    """
    rank = int(os.environ.get(variables.RANK, "0"))
    rank_pid = os.getpid()
    with open(call_path(directory), "rb") as f:
        fn, args, kwargs = pickle.load(f)  # cloudpickle's output loads with pickle
    try:
        value = fn(*args, **kwargs)
    except BaseException as e:  # noqa: B036: every failure goes back to the caller, even SystemExit
        if os.getpid() != rank_pid:  # a child `fn` forked: its exception is not the rank's
            traceback.print_exc()
            return 1
        _write_error(directory, rank, e, traceback.format_exc())
        return 1
    if os.getpid() != rank_pid:  # a child `fn` forked returned too: only the rank's own value counts
        return 0
    try:
        data = _dumps(value)
    except Exception as e:
        error = pickle.PicklingError(f"rank {rank}'s result could not be pickled: {type(e).__name__}: {e}")
        _write_error(directory, rank, error, traceback.format_exc())
        return 1
    _write(result_path(directory, rank), data)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
