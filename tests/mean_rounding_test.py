"""MEAN of float16 and bfloat16 across real processes: the float32 sum divided, then rounded once."""

import pytest

from tfring_dev.testing import rank_lines
from tfring_dev.testing import run_job

pytestmark = pytest.mark.multiprocess

# Per-rank values whose partial sums are exact in the type but whose full sum is not: rounding the
# sum before dividing moves the mean by one unit (float16: 286.875 / 3 = 95.625, not 287 / 3 ->
# 95.6875; bfloat16: 602 / 3 -> 201, not 600 / 3 = 200).
SCRIPT = r'''
import numpy as np
import tensorflow as tf
import tfring

tfring.init()
rank, size = tfring.rank(), tfring.size()
VALUES = {"float16": [100.5, 100.5, 85.875], "bfloat16": [140.0, 214.0, 248.0]}
for name, values in VALUES.items():
    dtype = tf.as_dtype(name)
    for n in (5, 70000):  # gathered (a few bytes), then the ring
        sign = np.where(np.arange(n) % 3 == 1, -1.0, 1.0)
        got = tfring.ops.allreduce(tf.constant(sign * values[rank], dtype=dtype), op="mean").numpy()
        mean32 = np.float32(sum(values)) / np.float32(size)
        want = (sign * mean32).astype(np.float32).astype(dtype.as_numpy_dtype)
        ok = got.tobytes() == want.tobytes()
        print(name, n, "OK" if ok else f"got {got[:3].astype(np.float64)} want {want[:3].astype(np.float64)}")
'''


def test_mean_of_16_bit_floats_is_rounded_once_on_every_rank():
    proc = run_job(3, SCRIPT, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for rank in range(3):
        lines = rank_lines(proc.stdout, rank)
        assert lines == ["float16 5 OK", "float16 70000 OK", "bfloat16 5 OK", "bfloat16 70000 OK"], (rank, lines)
