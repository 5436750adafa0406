"""`tfring doctor --self-test`: a 2-rank job on this host, started as a user starts one.

`run()` starts `tfring run -np 2 python -m tfring.doctor.selftest`. Each rank allreduces arrays of
every common dtype and size (empty, one element, odd, 1 Mi elements) with "sum", "mean", "min" and
"max", and compares each result with NumPy's bit for bit (on two ranks every result is determined:
`a + b` in the dtype, the 16-bit types added in float32 and rounded once, as tfring's core does);
then times a 64 MiB float32 allreduce. Rank 0 prints one line, `SELF_TEST_MARK` then JSON.
"""

import json
import os
import signal
import subprocess
import sys
import time

from tfring.doctor.finding import FAIL
from tfring.doctor.finding import OK
from tfring.doctor.finding import Finding

SELF_TEST_MARK = "TFRING_SELF_TEST "
SIZES = (0, 1, 4099, 1 << 20)
BANDWIDTH_BYTES = 64 << 20


def _expected(arrays, op, np):
    """What an allreduce of `arrays` (rank order) must return, computed as tfring's core does."""
    wide = np.float32 if arrays[0].dtype == np.float16 else arrays[0].dtype.type
    a, b = (x.astype(wide) for x in arrays)
    if op == "sum":
        out = a + b
    elif op == "mean":
        out = (a + b) / wide(2) if np.issubdtype(wide, np.floating) else np.trunc((a + b) / 2)  # C's division
    else:
        out = np.minimum(a, b) if op == "min" else np.maximum(a, b)
    return out.astype(arrays[0].dtype)


def _correctness(tfring, tf, np):
    """[(case, ok)] for every dtype, size and op, this rank's view."""
    cases = []
    for dtype in ("float32", "float64", "float16", "int32", "int64"):
        for size in SIZES:
            arrays = [_data(np, dtype, size, seed=r) for r in range(tfring.size())]
            for op in ("sum", "mean", "min", "max"):
                got = tfring.ops.allreduce(tf.constant(arrays[tfring.rank()]), op=op).numpy()
                want = _expected(arrays, op, np)
                same = got.shape == want.shape and got.tobytes() == want.tobytes()
                cases.append((f"{op} {dtype}[{size}]", same))
    return cases


def _data(np, dtype, size, seed):
    rng = np.random.default_rng(seed)
    if dtype.startswith("int"):
        return rng.integers(-1000, 1000, size).astype(dtype)
    return rng.standard_normal(size).astype(dtype)


def _bandwidth(tfring, tf, np):
    """Median seconds of a BANDWIDTH_BYTES float32 allreduce (2 warm-ups, 8 timed)."""
    x = tf.constant(np.ones(BANDWIDTH_BYTES // 4, np.float32))
    times = []
    for i in range(10):
        tfring.ops.barrier()
        start = time.perf_counter()
        tfring.ops.allreduce(x).numpy()
        if i >= 2:
            times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def _rank_main():
    import numpy as np
    import tensorflow as tf

    import tfring

    tfring.init()
    if tfring.size() != 2:
        raise SystemExit("the self-test runs on 2 ranks")
    cases = _correctness(tfring, tf, np)
    failed = [name for name, ok in cases if not ok]
    everyone = tfring.allgather_object(failed)
    seconds = _bandwidth(tfring, tf, np)
    if tfring.rank() == 0:
        result = {"ranks": tfring.size(), "transport": tfring.transport_name(), "cases": len(cases),
                  "failed": {str(r): f for r, f in enumerate(everyone) if f},
                  "bandwidth": {"bytes": BANDWIDTH_BYTES, "seconds": seconds,
                                "gb_per_s": BANDWIDTH_BYTES / seconds / 1e9}}
        print(SELF_TEST_MARK + json.dumps(result), flush=True)


def run(timeout=300):
    """Runs the 2-rank self-test and says what it found.

    Args:
        timeout: seconds the whole job may take before it is stopped (the finding then says so).

    Returns:
        (`Finding`, the result dict rank 0 printed or None).
    """
    cmd = [sys.executable, "-m", "tfring", "run", "-np", "2", sys.executable, "-m", "tfring.doctor.selftest"]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the launcher and its ranks
        proc.communicate()
        return Finding("self-test", FAIL, f"the 2-rank job did not finish in {timeout:g} s",
                       "tfring run -np 2 --verbose python -m tfring.doctor.selftest shows where it stops"), None
    result = next((json.loads(line.split(SELF_TEST_MARK, 1)[1]) for line in out.splitlines()
                   if SELF_TEST_MARK in line), None)
    if proc.returncode != 0 or result is None:
        lines = [line for line in err.splitlines() if line.strip()] or ["(no output)"]
        why = next((line for line in lines if line.startswith("tfring run: first failure:")), lines[-1])
        return Finding("self-test", FAIL, f"the 2-rank job failed (exit {proc.returncode}): {why}",
                       "the checks above marked fail or warn name the likely cause"), result
    return _finding(result), result


def _finding(result):
    bandwidth = result["bandwidth"]
    speed = (f"{bandwidth['bytes'] >> 20} MiB float32 allreduce in {bandwidth['seconds'] * 1e3:.1f} ms "
             f"({bandwidth['gb_per_s']:.2f} GB/s)")
    if result["failed"]:
        wrong = "; ".join(f"rank {r}: {', '.join(cases[:5])}" for r, cases in result["failed"].items())
        return Finding("self-test", FAIL, f"allreduce results differ from NumPy's: {wrong}",
                       "please report this with `tfring doctor --json`")
    return Finding("self-test", OK, f"2 ranks over {result['transport']}: {result['cases']} allreduces equal "
                   f"NumPy's bit for bit; {speed}")


if __name__ == "__main__":
    _rank_main()
