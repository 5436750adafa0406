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


def _write(path, value):
    """Writes `value` pickled to `path` atomically (a reader never sees half a file)."""
    with open(path + ".tmp", "wb") as f:
        pickle.dump(value, f)
    os.replace(path + ".tmp", path)


def main(directory):
    """Runs the pickled call in `directory` and writes `result.<rank>` or `error.<rank>` beside it.

    Returns:
        The process's exit code: 0, or 1 when the function raised.
    """
    rank = int(os.environ.get(variables.RANK, "0"))
    with open(os.path.join(directory, "call.pkl"), "rb") as f:
        fn, args, kwargs = pickle.load(f)  # cloudpickle's output loads with pickle
    try:
        value = fn(*args, **kwargs)
    except BaseException as e:  # noqa: B036: every failure goes back to the caller, even SystemExit
        text = traceback.format_exc()
        try:
            pickle.dumps(e)
        except Exception:
            e = RuntimeError(f"{type(e).__name__}: {e}")  # the exception itself cannot travel
        _write(os.path.join(directory, f"error.{rank}"), (e, text))
        sys.stderr.write(text)
        return 1
    _write(os.path.join(directory, f"result.{rank}"), value)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
