"""A correctness fuzz: hundreds of random collectives on 2 and 3 ranks against NumPy (issue 11).

Random kinds, dtypes, reduce ops, list lengths, shapes (0-size too), roots and fusion thresholds
(agreed at init, as they must be). Every rank derives every rank's inputs from one seed, checks its
results against NumPy, and prints a digest of all of them: the ranks must be bit-identical.
"""

import random

import pytest

from tfring_dev.testing import rank_lines
from tfring_dev.testing import run_job

pytestmark = pytest.mark.multiprocess

FUZZ = r'''
import hashlib, os
import numpy as np
import tensorflow as tf
import tfring

tfring.init()
rank, size = tfring.rank(), tfring.size()
seed, calls = int(os.environ["FUZZ_SEED"]), int(os.environ["FUZZ_CALLS"])
DTYPES = [np.float16, tf.bfloat16.as_numpy_dtype, np.float32, np.float64, np.int32, np.int64]
REDUCE = {"sum": np.add.reduce, "max": np.maximum.reduce, "min": np.minimum.reduce, "product": np.multiply.reduce}
digest, failures = hashlib.sha256(), []

def values(rng, shape, dtype, op):
    # Exactly representable, so sums and products are exact in every dtype and any order.
    pool = [-1.0, 1.0, 2.0, 0.5] if op == "product" else np.arange(-8, 8.5, 0.5)
    if np.issubdtype(dtype, np.integer):
        pool = [-1, 1, 2] if op == "product" else list(range(-9, 10))
    x = rng.choice(pool, size=shape).astype(np.float64)
    if op in ("min", "max") and dtype in (np.float32, np.float64) and x.size and rng.random() < 0.3:
        x.flat[rng.integers(x.size)] = np.nan
    return x.astype(dtype)

for call in range(calls):
    rng = np.random.default_rng([seed, call])  # the same stream on every rank
    kind = rng.choice(["allreduce", "broadcast", "allgather"])
    dtype = DTYPES[rng.integers(len(DTYPES))]
    op = str(rng.choice(list(REDUCE) + ["mean"]))
    shapes = [tuple(int(d) for d in rng.integers(0, 5, size=rng.integers(0, 3))) for _ in range(rng.integers(1, 6))]
    if rng.random() < 0.1:
        shapes.append((int(rng.integers(1000, 70000)),))  # big enough for several fusion passes
    vop = "sum" if op == "mean" else op
    data = [[values(rng, s, dtype, vop) for s in shapes] for r in range(size)]
    if kind == "allreduce":
        got = tfring.ops.allreduce([tf.constant(t) for t in data[rank]], op=op)
        want = [REDUCE[vop](np.stack([data[r][i].astype(np.float64) for r in range(size)]), axis=0) for i in range(len(shapes))]
        if op == "mean":
            want = [np.trunc(w / size) if np.issubdtype(dtype, np.integer) else w / size for w in want]
    elif kind == "broadcast":
        root = int(rng.integers(size))
        got = tfring.ops.broadcast([tf.constant(t) for t in data[rank]], root_rank=root)
        want = [t.astype(np.float64) for t in data[root]]
    else:
        rest = tuple(int(d) for d in rng.integers(0, 4, size=rng.integers(0, 2)))
        firsts = [int(rng.integers(0, 4)) for _ in range(size)]
        parts = [values(np.random.default_rng([seed, call, r]), (firsts[r],) + rest, dtype, "sum") for r in range(size)]
        got = [tfring.ops.allgather(tf.constant(parts[rank]))]
        want = [np.concatenate(parts).astype(np.float64)]
    for i, (g, w) in enumerate(zip(got, want)):
        g = g.numpy()
        digest.update(g.tobytes())
        g = g.astype(np.float64)
        exact = not (op == "mean" and kind == "allreduce" and not np.issubdtype(dtype, np.integer))
        tol = {np.float16: 1e-3, np.float32: 1e-6}.get(dtype, 1e-2 if dtype == tf.bfloat16.as_numpy_dtype else 1e-12)
        same = g.shape == w.shape and (np.array_equal(g, w, equal_nan=True) if exact
                                       else np.allclose(g, w, rtol=tol, atol=tol, equal_nan=True))
        if not same:
            failures.append(f"call {call} {kind} {np.dtype(dtype).name} {op} tensor {i} {w.shape}: {g.ravel()[:4]} vs {w.ravel()[:4]}")
print("FAILURES", len(failures), failures[:5])
print("DIGEST", digest.hexdigest())
'''


@pytest.mark.parametrize("ranks,transport,seed", [(2, "shm", 1), (3, "tcp", 2),
                                                   pytest.param(3, "shm", 3, marks=pytest.mark.extended)])
def test_random_collectives_match_numpy_and_are_identical_on_every_rank(ranks, transport, seed):
    threshold = random.Random(seed).choice([0, 1000, 65536, 1 << 20, 64 << 20])
    proc = run_job(ranks, FUZZ, env={"FUZZ_SEED": str(seed), "FUZZ_CALLS": "150", "TFRING_TRANSPORT": transport,
                                     "TFRING_FUSION_THRESHOLD": str(threshold)}, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    digests = set()
    for r in range(ranks):
        lines = rank_lines(proc.stdout, r)
        assert "FAILURES 0 []" in lines, (threshold, [l for l in lines if l.startswith("FAILURES")])
        digests.update(l for l in lines if l.startswith("DIGEST"))
    assert len(digests) == 1, digests
