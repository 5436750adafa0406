"""One rank of a warm job (`tfring_dev.warm_job`): runs the scripts a test hands it, one after another.

Run as `python -m tfring_dev.warm_worker FOLDER` (under `tfring run` for a job, alone for the
one-process runs). Request n is `FOLDER/n.json` ({"script": source, "env": {...}} or {"stop": true});
the worker runs it with this process's file descriptors 1 and 2 sent to `n-<rank>.out` / `.err`, then
writes `n-<rank>.json` ({"returncode": int}). It exits on a stop request, after a script that failed
(a failed collective leaves the runtime unusable), or when no request comes for `--idle` seconds.
"""

import argparse
import contextlib
import gc
import importlib
import json
import os
import sys
import time
import traceback

_POLL_SECONDS = (0.005, 0.2)  # first and longest pause between two looks for the next request


def _wait_for(path, idle_seconds):
    """The request at `path`, or None after `idle_seconds` without one."""
    deadline = time.monotonic() + idle_seconds
    pause = _POLL_SECONDS[0]
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            return None
        time.sleep(pause)
        pause = min(pause * 2, _POLL_SECONDS[1])
    with open(path) as f:
        return json.load(f)


@contextlib.contextmanager
def _environment(extra):
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def _output_to(stem):
    """Sends file descriptors 1 and 2 (Python's and the C++ libraries' output) to `stem`.out/.err."""
    streams = sys.stdout, sys.stderr  # a script may replace them: the next one gets them back
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    for fd, suffix in ((1, ".out"), (2, ".err")):
        target = os.open(stem + suffix, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.dup2(target, fd)
        os.close(target)
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr, *streams):
            stream.flush()
        sys.stdout, sys.stderr = streams
        for fd, old in zip((1, 2), saved):
            os.dup2(old, fd)
            os.close(old)


def _run(script, name):
    """Runs `script` as `__main__`; returns its exit status as a process would have."""
    import random

    import keras
    import numpy as np
    import tensorflow as tf

    # As in a fresh process: Keras' names and dtype policy, and no global seed anywhere (a script
    # that seeds would otherwise hand its random state to the next one).
    keras.backend.clear_session()
    tf.random.set_seed(None)
    np.random.seed(None)
    random.seed(None)
    try:
        exec(compile(script, name, "exec"), {"__name__": "__main__", "__file__": name})
        return 0
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)
        return 1
    except BaseException:  # noqa: B036 - the script's failure is its result, as in a process of its own
        traceback.print_exc()
        return 1
    finally:
        gc.collect()


def write_json_atomically(path, record):
    """Writes `record` as JSON to `path` by renaming a finished file into place."""
    with open(path + ".tmp", "w") as f:
        json.dump(record, f)
    os.replace(path + ".tmp", path)


def serve(folder, rank, idle_seconds):
    """Runs the requests in `folder` in order until a stop, a failure or `idle_seconds` of quiet.

    Returns:
        0, or the failed script's exit status (the launcher then stops the other ranks at once).
    """
    for n in range(sys.maxsize):
        request = _wait_for(os.path.join(folder, f"{n}.json"), idle_seconds)
        if request is None or request.get("stop"):
            return 0
        stem = os.path.join(folder, f"{n}-{rank}")
        with _environment(request.get("env", {})), _output_to(stem):
            code = _run(request["script"], f"warm-{n}.py")
        write_json_atomically(stem + ".json", {"returncode": code})
        if code != 0:
            return code


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    parser.add_argument("--idle", type=float, default=1800.0, help="seconds without a request before exiting")
    args = parser.parse_args(argv)
    tf = importlib.import_module("tensorflow")  # paid once, before the first request: that is the point
    # Fixed before TensorFlow starts, from the job's variables: a script that sets the same values
    # (as test scripts do) then passes wherever it runs in the job's sequence.
    tf.config.threading.set_intra_op_parallelism_threads(int(os.environ.get("TF_NUM_INTRAOP_THREADS", "0")))
    tf.config.threading.set_inter_op_parallelism_threads(int(os.environ.get("TF_NUM_INTEROP_THREADS", "0")))
    import tfring

    sys.exit(serve(args.folder, tfring.rank(), args.idle))  # joins the job (or a job of one) before the first request


if __name__ == "__main__":
    main()
