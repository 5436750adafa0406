"""RingStrategy with Keras 3: training on 2 ranks equals training in one process."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tfring.testing import QUIET_ENV
from tfring.testing import run_job

FIT = r'''
import json, os
import numpy as np
import tensorflow as tf
import keras
import tfring

tf.config.threading.set_intra_op_parallelism_threads(1)
keras.utils.set_random_seed(1)
rng = np.random.default_rng(0)
x = rng.standard_normal((512, 8)).astype("float32")
y = (x[:, 0] + 2 * x[:, 1] > 0).astype("int32") + (x[:, 2] > 1).astype("int32")
strategy = tfring.RingStrategy()
with strategy.scope():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(3)])
    opt = {"sgd": lambda: keras.optimizers.SGD(0.1), "adam": lambda: keras.optimizers.Adam(0.01)}[os.environ["OPT"]]()
    model.compile(optimizer=opt, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
source = os.environ["INPUT"]
if source == "numpy":
    hist = model.fit(x, y, batch_size=64, epochs=2, shuffle=False, verbose=0)
else:
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)
    hist = model.fit(ds, epochs=2, verbose=0)
ev = model.evaluate(x, y, batch_size=64, verbose=0, return_dict=True)
pred = model.predict(x, batch_size=64, verbose=0)
w = np.concatenate([v.numpy().ravel() for v in model.weights])
out = os.environ["OUT"]
np.save(f"{out}/w{strategy.rank}of{strategy.size}.npy", w)
np.save(f"{out}/p{strategy.rank}of{strategy.size}.npy", pred)
with open(f"{out}/logs{strategy.rank}of{strategy.size}.json", "w") as f:
    json.dump({"fit": hist.history, "eval": ev}, f)
print("DONE", strategy.rank, strategy.size)
'''


def _single(tmp_path, env):
    script = tmp_path / "fit.py"
    script.write_text(FIT)
    full = dict(os.environ, **QUIET_ENV, **env)
    full = {k: v for k, v in full.items() if not k.startswith("TFRING_")}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=full, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.parametrize("opt,source", [("sgd", "numpy"), ("adam", "dataset")])
def test_two_ranks_equal_one_process(tmp_path, opt, source):
    env = {"OPT": opt, "INPUT": source, "OUT": str(tmp_path)}
    _single(tmp_path, env)
    proc = run_job(2, FIT, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    one = np.load(tmp_path / "w0of1.npy")
    r0, r1 = np.load(tmp_path / "w0of2.npy"), np.load(tmp_path / "w1of2.npy")
    assert np.array_equal(r0, r1), "ranks differ"
    assert np.max(np.abs(r0 - one)) <= 1e-5, np.max(np.abs(r0 - one))
    # Logs are global: the same on both ranks and equal to one process on the same global batches.
    logs = [json.loads((tmp_path / f"logs{k}").read_text()) for k in ("0of1.json", "0of2.json", "1of2.json")]
    for key in ("loss", "accuracy"):
        np.testing.assert_allclose(logs[1]["fit"][key], logs[0]["fit"][key], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(logs[2]["fit"][key], logs[1]["fit"][key], rtol=0, atol=0)
        np.testing.assert_allclose(logs[1]["eval"][key], logs[0]["eval"][key], rtol=1e-5, atol=1e-6)
    # predict returns every rank the whole input's predictions, in order.
    p1 = np.load(tmp_path / "p0of1.npy")
    for k in (0, 1):
        pk = np.load(tmp_path / f"p{k}of2.npy")
        assert pk.shape == p1.shape
        np.testing.assert_allclose(pk, p1, atol=1e-5)
