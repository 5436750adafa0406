"""Ranks that build or compile different models of the same shapes: `fit` fails on every rank,
naming what differs (issue 33, item 6), and the same model on every rank trains as before."""

import pytest

from tfring_dev.testing import rank_lines
from tfring_dev.testing import run_job

pytestmark = pytest.mark.multiprocess

SCRIPT = r'''
import numpy as np
import tensorflow as tf
import keras
import tfring

tf.config.threading.set_intra_op_parallelism_threads(1)
strategy = tfring.RingStrategy()
x = np.linspace(-1, 1, 64, dtype="float32").reshape(16, 4)
y = (x[:, 0] > 0).astype("int32")
odd = strategy.rank == 1


def model(activation="relu", from_logits=True, steps=1):
    with strategy.scope():
        m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation=activation), keras.layers.Dense(2)])
        m.compile(optimizer=keras.optimizers.SGD(0.1), steps_per_execution=steps,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=from_logits))
    return m


cases = {
    "same": lambda: model(),
    "activation": lambda: model(activation="tanh" if odd else "relu"),
    "from_logits": lambda: model(from_logits=not odd),
    "steps_per_execution": lambda: model(steps=2 if odd else 1),
}
for name, make in cases.items():
    m = make()
    try:
        m.fit(x, y, batch_size=8, epochs=1, verbose=0)
        print(f"CASE {name}: ran")
    except ValueError as e:
        print(f"CASE {name}: {e}")
'''


def test_ranks_with_different_models_fail_naming_the_difference():
    job = run_job(2, SCRIPT, timeout=240)
    assert job.returncode == 0, job.stderr[-3000:]
    expected = {"activation": "layer 0 (Dense)", "from_logits": "compile setting `loss`",
                "steps_per_execution": "compile setting `steps_per_execution`"}
    for r in range(2):
        lines = dict(line[len("CASE "):].split(": ", 1) for line in rank_lines(job.stdout, r) if line.startswith("CASE "))
        assert lines["same"] == "ran", (r, lines)
        for case, needle in expected.items():
            message = lines[case]
            assert "the model trained by fit() differs between ranks" in message, (r, case, message)
            assert needle in message and "(rank 1 against rank 0" in message, (r, case, message)


EXTRA_LAYER = r'''
import tensorflow as tf
import keras
import tfring

strategy = tfring.RingStrategy()
try:
    with strategy.scope():
        layers = [keras.Input((4,)), keras.layers.Dense(8)]
        if strategy.rank == 1:
            layers.append(keras.layers.Dropout(0.2))  # a layer on one rank only: its own variables
        model = keras.Sequential(layers + [keras.layers.Dense(1)])
    print("BUILT")
except tf.errors.FailedPreconditionError as e:
    print("REFUSED", e.message.replace("\n", " "))
'''


def test_ranks_that_build_different_variables_are_told_so_not_asked_about_datasets():
    # A layer with variables on some ranks only: the ranks' variable broadcasts disagree while the
    # model is built, long before fit could compare the models.
    job = run_job(2, EXTRA_LAYER, timeout=120)
    assert job.returncode == 0, job.stderr[-3000:]
    for r in range(2):
        refused = [line for line in rank_lines(job.stdout, r) if line.startswith("REFUSED")]
        assert refused, job.stdout[-2000:]
        assert "the ranks created different variables in strategy.scope()" in refused[0], refused[0]
        assert "different models" in refused[0] and "datasets of different sizes" not in refused[0], refused[0]
