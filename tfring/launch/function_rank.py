"""One rank of `tfring.run(fn)`: `python -m tfring.launch.function_rank DIR` loads the function from
DIR, runs it, and leaves its return value (or its exception and traceback) there for the caller.

DIR is a private directory (mode 0700) the caller made on this host; nothing is ever read from the
network.
"""

import os
import pickle
import sys
import traceback

from tfring.launch import variables


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


def _write(path, value):
    """Writes `value` pickled to `path` atomically (a reader never sees half a file)."""
    with open(path + ".tmp", "wb") as f:
        f.write(_dumps(value))
    os.replace(path + ".tmp", path)


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
        The process's exit code: 0, or 1 when the function raised.
    """
    rank = int(os.environ.get(variables.RANK, "0"))
    with open(call_path(directory), "rb") as f:
        fn, args, kwargs = pickle.load(f)  # cloudpickle's output loads with pickle
    try:
        value = fn(*args, **kwargs)
    except BaseException as e:  # noqa: B036: every failure goes back to the caller, even SystemExit
        text = traceback.format_exc()
        _write(error_path(directory, rank), (_travelling(e), text))
        sys.stderr.write(text)
        return 1
    _write(result_path(directory, rank), value)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
