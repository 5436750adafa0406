"""`tfring.callbacks.StragglerReport`: rank 0 says how long each rank waited for the others and
names the rank they waited for."""

import json

import pytest

from tfring_dev.testing import rank_lines
from tfring_dev.testing import run_job

pytestmark = pytest.mark.multiprocess

SLOW_RANK_ONE = r'''
import json, time
import numpy as np
import keras
import tensorflow as tf
import tfring

tf.config.threading.set_intra_op_parallelism_threads(1)
strategy = tfring.RingStrategy()
with strategy.scope():
    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    m.compile(optimizer="sgd", loss="mse")
slow = keras.callbacks.LambdaCallback(
    on_train_batch_begin=lambda *_, **__: time.sleep(0.25) if strategy.rank == 1 else None)
report = tfring.callbacks.StragglerReport()
x = np.ones((64, 4), "float32")
m.fit(x, x[:, :2], batch_size=8, epochs=2, verbose=0, callbacks=[slow, report])
print("HISTORY", json.dumps(report.history), flush=True)
'''


def test_the_slow_rank_is_named_and_the_others_waits_are_measured():
    proc = run_job(2, SLOW_RANK_ONE, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    zero = rank_lines(proc.stdout, 0)
    lines = [line for line in zero if line.startswith("tfring: epoch")]
    assert len(lines) == 2, zero
    assert all(line.endswith("they waited for rank 1") for line in lines), lines
    histories = [json.loads(next(line for line in rank_lines(proc.stdout, r) if line.startswith("HISTORY "))[8:])
                 for r in (0, 1)]
    # Every rank keeps the same waits (each times its own epoch).
    assert [e["waited_seconds"] for e in histories[0]] == [e["waited_seconds"] for e in histories[1]]
    for epoch in histories[0]:
        rank0, rank1 = epoch["waited_seconds"]
        # 8 steps of 0.25 s on rank 1: rank 0 waits about 2 s per epoch, rank 1 hardly at all.
        assert 1.5 < rank0 < epoch["seconds"] and rank1 < 0.5, epoch
    assert not [line for line in rank_lines(proc.stdout, 1) if line.startswith("tfring: epoch")]
