"""Data that does not divide into the ranks, and steps_per_execution: results equal one process.

One script trains, evaluates and predicts a series of cases (row counts 1, 7, 13, 501, 1797 with
batch sizes that leave remainders for 2 and 3 ranks; NumPy, tf.data, validation_split,
validation_data; steps_per_execution 1, 2, 4, 8 over an epoch of 13 steps). It runs once as a
single process and as jobs of 2 and 3 ranks; each case's weights, logs, evaluation and
predictions are compared.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tfring_dev.testing import QUIET_ENV

pytestmark = pytest.mark.multiprocess

SCRIPT = r'''
import json, os
import numpy as np
import tensorflow as tf
import keras
import tfring

tf.config.threading.set_intra_op_parallelism_threads(1)
rng = np.random.default_rng(0)
X = rng.standard_normal((1797, 16)).astype("float32")
Y = (X[:, 0] + X[:, 1] > 0).astype("int32") + (X[:, 2] > 0.5).astype("int32")
strategy = tfring.RingStrategy()
out = os.environ["OUT"]


def model(spe, bn, accumulate=None, loss_scale=False):
    keras.utils.set_random_seed(1)
    with strategy.scope():
        layers = [keras.Input((16,)), keras.layers.Dense(8, activation="relu")]
        layers += [keras.layers.BatchNormalization()] if bn else []
        m = keras.Sequential(layers + [keras.layers.Dense(3)])
        optimizer = keras.optimizers.SGD(0.1, gradient_accumulation_steps=accumulate)
        if loss_scale:
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        m.compile(optimizer=optimizer, metrics=["accuracy"], steps_per_execution=spe,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m


def batches(n, b):
    return tf.data.Dataset.from_tensor_slices((X[:n], Y[:n])).batch(b)


def run(name, rows, batch, source, spe=1, bn=False, **options):
    m = model(spe, bn, **options)
    x, y = X[:rows], Y[:rows]
    fit = dict(epochs=2, verbose=0)
    if source == "numpy":
        h = m.fit(x, y, batch_size=batch, shuffle=False, **fit)
    elif source == "tfdata":
        h = m.fit(batches(rows, batch), **fit)
    elif source == "validation_split":
        h = m.fit(x, y, batch_size=batch, shuffle=False, validation_split=0.3, **fit)
    else:
        h = m.fit(batches(rows, batch), validation_data=batches(397, 32), **fit)
    ev = m.evaluate(x, y, batch_size=batch, verbose=0, return_dict=True)
    p = m.predict(x, batch_size=batch, verbose=0)
    w = np.concatenate([v.numpy().ravel() for v in m.weights])
    # (Keras' gradient accumulators are each rank's partial sums: summed when they are applied.)
    opt = [float(v.numpy()) for v in m.optimizer.variables if "accumulator" not in v.path and v.shape == ()]
    np.savez(f"{out}/{name}-{strategy.rank}of{strategy.size}.npz", w=w, p=p, opt=opt,
             logs=json.dumps({"fit": h.history, "eval": ev}))


CASES = {
    "rows1": (1, 4, "numpy"), "rows7": (7, 4, "tfdata"), "rows13": (13, 6, "validation_split"),
    "rows501": (501, 64, "numpy"), "rows1797": (1797, 100, "validation_data"),
    "spe1": (1797, 140, "tfdata", 1), "spe2": (1797, 140, "tfdata", 2),
    "spe4": (1797, 140, "numpy", 4), "spe8": (1797, 140, "validation_data", 8),
    "batchnorm": (9, 8, "numpy", 1, True),
    # Keras' gradient accumulators: each rank's own partial sums, all-reduced when applied.
    "accumulate": (501, 64, "numpy", 1, False, {"accumulate": 3}),
    # LossScaleOptimizer asks every rank "are my gradients finite?": a rank without rows has no say.
    "lossscale": (9, 8, "numpy", 1, True, {"loss_scale": True}),
}
for name in os.environ["CASES"].split(","):
    case = CASES[name]
    options = case[-1] if isinstance(case[-1], dict) else {}
    run(name, *(case[:-1] if options else case), **options)
'''

EQUAL_CASES = ["rows1", "rows7", "rows13", "rows501", "rows1797", "spe1", "spe2", "spe4", "spe8", "accumulate"]
# On 3 ranks: batches that leave two ranks without rows (rows1, the last batch of rows13),
# steps_per_execution, accumulation and batch norm; larger row counts take rows13's paths.
THREE_RANK_CASES = ["rows1", "rows13", "spe4", "accumulate", "batchnorm"]


@pytest.fixture(scope="module")
def results(warm, tmp_path_factory):
    out = tmp_path_factory.mktemp("uneven")
    env = {"OUT": str(out), "PYTHONWARNINGS": "ignore"}
    single = dict(os.environ, **QUIET_ENV, **env, CASES=",".join(EQUAL_CASES + ["lossscale"]))
    single = {k: v for k, v in single.items() if not k.startswith("TFRING_")}
    script = out / "cases.py"
    script.write_text(SCRIPT)
    proc = subprocess.run([sys.executable, str(script)], env=single, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for size, cases in ((2, EQUAL_CASES + ["batchnorm", "lossscale"]), (3, THREE_RANK_CASES)):
        proc = warm.run_job(size, SCRIPT, env=dict(env, CASES=",".join(cases)), timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def _load(out, name, rank, size):
    data = np.load(out / f"{name}-{rank}of{size}.npz")
    return data["w"], data["p"], json.loads(str(data["logs"]))


def _optimizer_scalars(out, name, rank, size):
    return np.load(out / f"{name}-{rank}of{size}.npz")["opt"]


@pytest.mark.parametrize("size,name", [(2, n) for n in EQUAL_CASES] +
                         [(3, n) for n in THREE_RANK_CASES if n != "batchnorm"])
def test_uneven_data_equals_one_process(results, size, name):
    w1, p1, logs1 = _load(results, name, 0, 1)
    ranks = [_load(results, name, r, size) for r in range(size)]
    for w, p, logs in ranks[1:]:
        assert np.array_equal(w, ranks[0][0]), "ranks' weights differ"
        assert np.array_equal(p, ranks[0][1]), "ranks' predictions differ"
        assert logs == ranks[0][2], "ranks' logs differ"
    w, p, logs = ranks[0]
    assert np.max(np.abs(w - w1)) <= 1e-5, np.max(np.abs(w - w1))
    # predict returns exactly the input's rows, in order.
    assert p.shape == p1.shape
    np.testing.assert_allclose(p, p1, rtol=1e-5, atol=1e-5)
    assert logs["fit"].keys() == logs1["fit"].keys()
    for key in logs1["fit"]:
        np.testing.assert_allclose(logs["fit"][key], logs1["fit"][key], rtol=1e-5, atol=1e-6, err_msg=key)
    for key in logs1["eval"]:
        np.testing.assert_allclose(logs["eval"][key], logs1["eval"][key], rtol=1e-5, atol=1e-6, err_msg=key)


def test_steps_per_execution_equals_one_step_at_a_time(results):
    w1, p1, logs1 = _load(results, "spe1", 0, 2)
    for spe in (2, 4, 8):
        w, p, logs = _load(results, f"spe{spe}", 0, 2)
        np.testing.assert_allclose(w, w1, rtol=0, atol=1e-6, err_msg=f"steps_per_execution={spe}")


def test_loss_scaling_is_not_upset_by_a_rank_without_rows(results):
    """mixed precision's finiteness vote: the rank with no rows (NaN batch statistics) abstains, so
    no step is skipped and the loss scale stays what one process has."""
    ranks = [_load(results, "lossscale", r, 2)[0] for r in range(2)]
    assert np.all(np.isfinite(ranks[0])) and np.array_equal(ranks[0], ranks[1])
    # Iterations, loss scale, step counter, applied steps: what one process has.
    one = _optimizer_scalars(results, "lossscale", 0, 1)
    for r in range(2):
        np.testing.assert_array_equal(_optimizer_scalars(results, "lossscale", r, 2), one)


@pytest.mark.parametrize("size", [2, 3])
def test_a_rank_without_rows_adds_no_nan(results, size):
    """9 rows in batches of 8: the last batch's one row leaves the other ranks none, and a batch
    normalization of zero rows is NaN; those ranks must contribute nothing, not NaN."""
    ranks = [_load(results, "batchnorm", r, size) for r in range(size)]
    for w, _, _ in ranks:
        assert np.all(np.isfinite(w))
        assert np.array_equal(w, ranks[0][0])
