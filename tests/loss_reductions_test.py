"""Every Keras loss reduction gives the loss of the global batch, as one process computes it.

Keras divides a rank's loss by what that rank holds (its elements, its unmasked elements, or its
sum of sample weights) and then scales it by 1 / ranks (RingStrategy: by the rank's share of the
rows). That is the global mean only when the divisor is proportional to the rows, which masks and
sample weights break: a rank whose sequences are mostly padding would weigh its few tokens as
much as another rank's many.
"""

import numpy as np
import pytest

from tfring_dev.testing import assert_ranks_equal_one_process

pytestmark = pytest.mark.multiprocess

SCRIPT = r'''
import os
import numpy as np
import tensorflow as tf
import keras
import tfring

tf.config.threading.set_intra_op_parallelism_threads(1)
rng = np.random.default_rng(0)
# Token sequences padded with 0: the first half of the rows is mostly padding, so in each step
# one rank holds far fewer unmasked tokens than the other.
ROWS, STEPS = 128, 6
lengths = np.where(np.arange(ROWS) % 64 < 32, rng.integers(1, 3, ROWS), rng.integers(5, STEPS + 1, ROWS))
TOKENS = rng.integers(1, 20, (ROWS, STEPS)) * (np.arange(STEPS) < lengths[:, None])
TARGETS = (TOKENS % 3).astype("int32")
WEIGHTS = rng.uniform(0.1, 3.0, ROWS).astype("float32")
TOKEN_WEIGHTS = rng.uniform(0.1, 3.0, (ROWS, STEPS)).astype("float32")
X = rng.standard_normal((ROWS, 8)).astype("float32")
Y = (X[:, 0] > 0).astype("int32")
strategy = tfring.RingStrategy()
out = os.environ["OUT"]


def sequence_model():
    return keras.Sequential([keras.Input((STEPS,), dtype="int32"), keras.layers.Embedding(20, 8, mask_zero=True),
                             keras.layers.Dense(16, activation="relu"), keras.layers.Dense(3)])


def row_model():
    return keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(2)])


def run(name, model, x, y, reduction="sum_over_batch_size", weights=None, rows=ROWS, lr=0.5, eager=False):
    keras.utils.set_random_seed(1)
    with strategy.scope():
        m = model()
        m.compile(optimizer=keras.optimizers.SGD(lr, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=reduction),
                  run_eagerly=eager)
    w = None if weights is None else weights[:rows]
    history = m.fit(x[:rows], y[:rows], sample_weight=w, batch_size=64, epochs=2, shuffle=False, verbose=0)
    evaluated = m.evaluate(x[:rows], y[:rows], sample_weight=w, batch_size=64, verbose=0)
    np.save(f"{out}/{name}-{strategy.rank}of{strategy.size}.npy", np.concatenate([v.numpy().ravel() for v in m.weights]))
    np.save(f"{out}/{name}-loss-{strategy.rank}of{strategy.size}.npy", np.array(history.history["loss"] + [evaluated]))


run("rows", row_model, X, Y)
run("rows_weighted_mean", row_model, X, Y, "mean_with_sample_weight", WEIGHTS)
run("rows_weighted_mean_odd", row_model, X, Y, "mean_with_sample_weight", WEIGHTS, rows=101)
run("masked", sequence_model, TOKENS, TARGETS)
run("masked_odd", sequence_model, TOKENS, TARGETS, rows=101)
run("masked_no_rows", sequence_model, TOKENS, TARGETS, rows=65)  # a last step of 1 row: a rank holds none
run("masked_eager", sequence_model, TOKENS, TARGETS, rows=65, eager=True)
run("masked_sum", sequence_model, TOKENS, TARGETS, "sum", lr=0.005)  # a sum over ~200 tokens
run("masked_weighted_mean", sequence_model, TOKENS, TARGETS, "mean_with_sample_weight", TOKEN_WEIGHTS)
'''

CASES = ["rows", "rows_weighted_mean", "rows_weighted_mean_odd", "masked", "masked_odd", "masked_no_rows",
         "masked_eager", "masked_sum", "masked_weighted_mean"]


@pytest.fixture(scope="module")
def results(warm, tmp_path_factory):
    out = tmp_path_factory.mktemp("loss_reductions")
    warm.run_alone_then_jobs(SCRIPT, env={"OUT": str(out), "PYTHONWARNINGS": "ignore"})
    return out


@pytest.mark.parametrize("name", CASES)
def test_weights_equal_one_process(results, name):
    assert_ranks_equal_one_process(results, name, 2)


@pytest.mark.parametrize("name", CASES)
def test_the_logged_and_evaluated_loss_is_the_global_batch_loss(results, name):
    one = np.load(results / f"{name}-loss-0of1.npy")
    for rank in range(2):
        np.testing.assert_allclose(np.load(results / f"{name}-loss-{rank}of2.npy"), one, rtol=1e-5)
