"""Gradient compression reaches gradients only: every other reduction stays exact.

A communication hook (and so `compression=`) sees the gradients entering an optimizer and nothing
else. Keras' synchronized batch normalization sums activations in the thousands through
`ReplicaContext.all_reduce`: in float16 those sums overflow (65,504), so a hook that saw them would
turn the moving statistics into inf/NaN. A user's own `all_reduce` in a step, `strategy.reduce`
and metrics stay exact too.
"""

import json

import numpy as np
import pytest

from tfring_dev.testing import rank_lines
from tfring_dev.testing import run_alone
from tfring_dev.testing import run_job

pytestmark = pytest.mark.multiprocess

SYNC_BN = r'''
import json
import os
import numpy as np
import tensorflow as tf
import keras
import tfring

tf.config.threading.set_intra_op_parallelism_threads(1)
rng = np.random.default_rng(0)
X = rng.standard_normal((96, 6)).astype("float32")
Y = (X[:, :1] - 2 * X[:, 1:2]).astype("float32")
seen = []


def spy(state, bucket):
    """An exact hook that records what reaches it."""
    seen.extend(tuple(g.shape.as_list()) for g in bucket.gradients)
    return bucket.allreduce(bucket.gradients)


def model():
    # A fixed layer scales the inputs into the thousands before the synchronized batch norm, so
    # its statistics depend on the data alone, not on how the gradients travelled.
    return keras.Sequential([keras.Input((6,)), keras.layers.Rescaling(3000.0, offset=5000.0),
                             keras.layers.BatchNormalization(synchronized=True, momentum=0.5),
                             keras.layers.Dense(4, activation="relu"), keras.layers.Dense(1)])


class OwnReduce(keras.Model):
    """A step that all-reduces a non-gradient itself (a sum in the millions)."""

    def train_step(self, data):
        x, y = data
        loss = self.compute_loss(x=x, y=y, y_pred=self(x, training=True))
        total = tf.distribute.get_replica_context().all_reduce("sum", tf.reduce_sum(x * 1e6))
        totals.append(float(total))
        return {"loss": loss}


results, totals = {}, []
size = int(os.environ.get("TFRING_SIZE", "1"))
for compression in ["none", "fp16", "bf16", "spy"]:
    strategy = tfring.RingStrategy(compression=None if compression in ("none", "spy") else compression)
    if compression == "spy" and strategy.size > 1:
        strategy.register_comm_hook(None, spy)
    keras.utils.set_random_seed(1)
    with strategy.scope():
        m = model()
        m.compile(optimizer=keras.optimizers.SGD(1e-3), loss="mse")
    m.fit(X, Y, batch_size=32, epochs=2, shuffle=False, verbose=0)
    bn = m.layers[1]
    stats = np.concatenate([bn.moving_mean.numpy(), bn.moving_variance.numpy()])
    weights = np.concatenate([w.ravel() for w in m.get_weights()])
    results[compression] = {"stats": stats.tolist(), "weights": weights.tolist()}
    if compression == "spy":
        trainable = sorted(tuple(v.shape.as_list()) for v in m.trainable_variables)
        results[compression]["only_gradients"] = sorted(seen) == sorted(trainable * (len(seen) // len(trainable)))
        results[compression]["hook_saw"] = len(seen)

    with strategy.scope():
        inp = keras.Input((6,))
        own = OwnReduce(inp, keras.layers.Dense(1)(inp))
        own.compile(optimizer="sgd", loss="mse", run_eagerly=True)
    own.fit(X, Y, batch_size=96, epochs=1, shuffle=False, verbose=0)
    results[compression]["own_sum"] = totals.pop()
    results[compression]["reduced"] = float(strategy.reduce("SUM", strategy.run(lambda: tf.constant(70000.0)), axis=None))
print("RESULTS", json.dumps(results))
'''


def _results(lines):
    return json.loads([l for l in lines if l.startswith("RESULTS ")][0][len("RESULTS "):])


def test_synchronized_batch_norm_and_own_reductions_are_exact_under_every_compression():
    alone = run_alone(SYNC_BN, timeout=400)
    assert alone.returncode == 0, alone.stderr[-3000:]
    one = _results(alone.stdout.splitlines())
    job = run_job(2, SYNC_BN, timeout=400)
    assert job.returncode == 0, job.stderr[-3000:]
    x_sum = float(np.sum(np.random.default_rng(0).standard_normal((96, 6)).astype("float32") * np.float32(1e6)))
    for rank in range(2):
        got = _results(rank_lines(job.stdout, rank))
        for compression, r in got.items():
            stats = np.array(r["stats"])
            assert np.all(np.isfinite(stats)), (compression, stats)
            np.testing.assert_allclose(stats, one[compression]["stats"], rtol=2e-6, err_msg=compression)
            weights = np.array(r["weights"])
            assert np.all(np.isfinite(weights)), compression
            if compression in ("none", "spy"):  # exact: the gradients trained as one process's
                np.testing.assert_allclose(weights, one[compression]["weights"], rtol=1e-5, atol=1e-6)
            # The step's own all_reduce of a non-gradient: the sum of both ranks' halves, exact in float32.
            assert r["own_sum"] == pytest.approx(x_sum, rel=1e-6), (compression, r["own_sum"], x_sum)
            assert r["reduced"] == 140000.0, compression
        assert got["spy"]["only_gradients"] and got["spy"]["hook_saw"] > 0, got["spy"]
