"""LARS, warm-up and decay under RingStrategy with 2 real ranks."""

import os
import subprocess
import sys

import numpy as np

import pytest

from tfring_dev.testing import QUIET_ENV
from tfring_dev.testing import rank_lines

pytestmark = pytest.mark.multiprocess

SCRIPT = r'''
import json, os
import numpy as np
import tensorflow as tf
import keras
import tfring

tf.config.threading.set_intra_op_parallelism_threads(1)
keras.utils.set_random_seed(1)
rng = np.random.default_rng(0)
x = rng.standard_normal((256, 8)).astype("float32")
y = (x[:, 0] + 2 * x[:, 1] > 0).astype("int32") + (x[:, 2] > 1).astype("int32")
strategy = tfring.RingStrategy()
with strategy.scope():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.BatchNormalization(), keras.layers.Dense(3)])
    lr = tfring.scale_learning_rate(0.5, global_batch_size=64, base_batch_size=32)
    model.compile(optimizer=tfring.optimizers.LARS(lr, nesterov=True),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])

class Rates(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.rates = []
    def on_train_batch_end(self, batch, logs=None):
        self.rates.append(float(self.model.optimizer.learning_rate.numpy()))

rates = Rates()
hist = model.fit(x, y, batch_size=64, epochs=4, shuffle=False, verbose=0,
                 callbacks=[tfring.callbacks.LearningRateWarmup(warmup_epochs=2),
                            tfring.callbacks.MultiStepDecay(milestones=[3], factor=0.1), rates])
w = np.concatenate([v.numpy().ravel() for v in model.weights])
every = tfring.ops.allgather(tf.reshape(tf.constant(w), [1, -1])).numpy()
all_rates = tfring.ops.allgather(tf.reshape(tf.constant(rates.rates, tf.float64), [1, -1])).numpy()
np.save(os.path.join(os.environ["OUT"], f"w{strategy.rank}of{strategy.size}.npy"), w)
print("RATES", json.dumps(rates.rates))
print("SAME_RATES", bool(np.all(all_rates == all_rates[0])))
print("SAME_WEIGHTS", bool(np.all(every == every[0])))
print("LOGGED", json.dumps(hist.history["learning_rate"]))
print("LOSS", json.dumps(hist.history["loss"]))
'''


def test_lars_with_warmup_and_decay_on_two_ranks(warm, tmp_path):
    script = tmp_path / "large_batch.py"
    script.write_text(SCRIPT)
    proc = warm.run_job(2, SCRIPT, env={"OUT": str(tmp_path)}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # The same script in one process with the same global batch.
    env = {k: v for k, v in dict(os.environ, **QUIET_ENV, OUT=str(tmp_path)).items() if not k.startswith("TFRING_")}
    single = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert single.returncode == 0, single.stderr[-3000:]

    import json

    for r in range(2):
        lines = rank_lines(proc.stdout, r)
        assert "SAME_RATES True" in lines and "SAME_WEIGHTS True" in lines, lines
        rates = json.loads(next(l for l in lines if l.startswith("RATES"))[6:])
        # 4 steps per epoch; warm-up from target/2 (2 ranks) to target over 2 epochs, then x0.1 at 3.
        target = 0.5 * 64 / 32
        expected = [target / 2 + target / 2 * (b / 4) / 2 for b in range(8)] + [target] * 4 + [target / 10] * 4
        np.testing.assert_allclose(rates, expected, rtol=1e-6)
        logged = json.loads(next(l for l in lines if l.startswith("LOGGED"))[7:])
        np.testing.assert_allclose(logged, [expected[3], expected[7], target, target / 10], rtol=1e-6)
        losses = json.loads(next(l for l in lines if l.startswith("LOSS"))[5:])
        assert losses[-1] < losses[0], losses
    # On one process the default warm-up start is target / 1: the rates differ, so compare the
    # ranks with each other here, and LARS's maths with one process in the next test.
    w0, w1 = (np.load(tmp_path / f"w{r}of2.npy") for r in range(2))
    assert np.array_equal(w0, w1)


EXACT = r'''
import os
import numpy as np
import tensorflow as tf
import keras
import tfring

tf.config.threading.set_intra_op_parallelism_threads(1)
keras.utils.set_random_seed(1)
rng = np.random.default_rng(0)
x = rng.standard_normal((128, 8)).astype("float32")
y = x[:, :2] * 2 - x[:, 2:4]
strategy = tfring.RingStrategy()
with strategy.scope():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="tanh"), keras.layers.Dense(2)])
    # A graph-side schedule under the strategy (Keras #19504 broke schedules under MirroredStrategy).
    lr = tfring.schedules.WarmUp(tfring.schedules.MultiStepDecay(1.0, [3]), warmup_steps=2, initial_learning_rate=0.1)
    model.compile(optimizer=tfring.optimizers.LARS(lr, momentum=0.9, fused=os.environ["FUSED"] == "1"), loss="mse")
model.fit(x, y, batch_size=64, epochs=2, shuffle=False, verbose=0)
w = np.concatenate([v.numpy().ravel() for v in model.weights])
np.save(os.path.join(os.environ["OUT"], f"{os.environ['FUSED']}w{strategy.rank}of{strategy.size}.npy"), w)
'''


def test_lars_two_ranks_equal_one_process(warm, tmp_path):
    script = tmp_path / "exact.py"
    script.write_text(EXACT)
    for fused in ("1", "0"):
        proc = warm.run_job(2, EXACT, env={"OUT": str(tmp_path), "FUSED": fused}, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        env = {k: v for k, v in dict(os.environ, **QUIET_ENV, OUT=str(tmp_path), FUSED=fused).items()
               if not k.startswith("TFRING_")}
        single = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
        assert single.returncode == 0, single.stderr[-3000:]
        w0, w1, one = (np.load(tmp_path / f"{fused}w{name}.npy") for name in ("0of2", "1of2", "0of1"))
        assert np.array_equal(w0, w1)
        assert np.max(np.abs(w0 - one)) <= 1e-5, np.max(np.abs(w0 - one))
