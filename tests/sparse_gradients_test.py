"""Sparse gradients (an Embedding's tf.IndexedSlices): allgathered as rows, results equal one process."""

import pytest

from tfring_dev.testing import assert_ranks_equal_one_process
from tfring_dev.testing import rank_lines
from tfring_dev.testing import run_job

pytestmark = pytest.mark.multiprocess

SCRIPT = r'''
import os
import numpy as np
import tensorflow as tf
import keras
import tfring
from tfring.strategy.gradients import sparse as sparse_gradients

tf.config.threading.set_intra_op_parallelism_threads(1)
out = os.environ["OUT"]
calls = []
original = sparse_gradients.reduce_slices
sparse_gradients.reduce_slices = lambda slices, *a, **k: calls.append(len(slices)) or original(slices, *a, **k)


def run(name, vocab, optimizer, sparse_as_dense):
    strategy = tfring.RingStrategy(sparse_as_dense=sparse_as_dense)
    rng = np.random.default_rng(0)
    x = rng.integers(0, vocab, (97, 5))  # 97 rows in batches of 32: the last one leaves ranks without rows
    y = (x[:, 0] % 3).astype("int32")
    keras.utils.set_random_seed(1)
    with strategy.scope():
        m = keras.Sequential([keras.Input((5,), dtype="int64"), keras.layers.Embedding(vocab, 4),
                              keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(3)])
        m.compile(optimizer=keras.optimizers.get(optimizer),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    m.fit(x, y, batch_size=32, epochs=2, verbose=0, shuffle=False)
    w = np.concatenate([v.numpy().ravel() for v in m.weights])
    np.save(f"{out}/{name}-{strategy.rank}of{strategy.size}.npy", w)


CASES = {"gathered_sgd": (50000, "sgd", False), "gathered_adam": (50000, "adam", False),
         "densified_by_count": (20, "sgd", False), "sparse_as_dense": (50000, "sgd", True)}
for name in os.environ["CASES"].split(","):
    run(name, *CASES[name])
print("SPARSE_REDUCTIONS", len(calls))
'''

CASES = ["gathered_sgd", "gathered_adam", "densified_by_count", "sparse_as_dense"]


@pytest.fixture(scope="module")
def results(warm, tmp_path_factory):
    out = tmp_path_factory.mktemp("sparse")
    env = {"OUT": str(out), "PYTHONWARNINGS": "ignore", "CASES": ",".join(CASES)}
    for proc in warm.run_alone_then_jobs(SCRIPT, env=env, sizes=(2, 3), timeout=600):
        # Each case's train step (traced once) handed the Embedding gradient over as IndexedSlices.
        assert "SPARSE_REDUCTIONS 4" in rank_lines(proc.stdout, 0), proc.stdout[-2000:]
    return out


@pytest.mark.parametrize("size", [2, 3])
@pytest.mark.parametrize("case", CASES)
def test_sparse_gradients_equal_one_process(results, case, size):
    assert_ranks_equal_one_process(results, case, size)


# TensorFlow's default threads (not pinned) and rows looked up many times a batch: the CPU scatter
# that applies sparse rows adds a row's duplicates from several threads in any order.
CROWDED = r'''
import hashlib
import numpy as np
import keras
import tfring

strategy = tfring.RingStrategy()
rng = np.random.default_rng(0)
x = rng.zipf(1.3, (4096, 20)) % 100000  # a few ids thousands of times a batch, most once
y = (x.sum(axis=1) % 2).astype("int32")
keras.utils.set_random_seed(1)
with strategy.scope():
    m = keras.Sequential([keras.Input((20,), dtype="int64"), keras.layers.Embedding(100000, 64),
                          keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(2)])
    m.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
m.fit(x, y, batch_size=512, epochs=2, verbose=0, shuffle=False)
print("DIGEST", hashlib.sha256(np.concatenate([v.numpy().ravel() for v in m.weights]).tobytes()).hexdigest())
'''


def test_crowded_sparse_rows_leave_every_rank_the_same_bits_on_every_run():
    # Fresh processes with two intra-op threads each (the tests' default is one; a warm process
    # keeps the threads an earlier script pinned).
    digests = set()
    for _ in range(2):
        proc = run_job(2, CROWDED, env={"TF_NUM_INTRAOP_THREADS": "2", "OMP_NUM_THREADS": "2"}, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        for r in range(2):
            digests.update(line.split()[1] for line in rank_lines(proc.stdout, r) if line.startswith("DIGEST"))
    assert len(digests) == 1, digests
