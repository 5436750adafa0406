"""Keras' gradient clipping (`clipnorm`, `global_clipnorm`, `clipvalue`) and `LossScaleOptimizer`'s
finiteness check under RingStrategy act on the job's gradients, the global batch's, as in one
process: the weights equal one process's.

Keras 3 clips before its TensorFlow optimizer all-reduces; clipping each rank's share and adding
the clipped shares is not what one process computes (with `clipnorm=c` two shares could add up
to a norm of 2c), so RingStrategy all-reduces the gradients as they enter the optimizer (its door:
tfring/strategy/gradients/door.py) and Keras clips the sum.
"""

import json

import pytest

from tfring_dev.testing import assert_ranks_equal_one_process

pytestmark = pytest.mark.multiprocess

SCRIPT = r'''
import json, os
import numpy as np
import tensorflow as tf
import keras
import tfring

tf.config.threading.set_intra_op_parallelism_threads(1)
rng = np.random.default_rng(0)
X = rng.standard_normal((256, 16)).astype("float32")
Y = (X[:, 0] + X[:, 1] > 0).astype("int32") + (X[:, 2] > 0.5).astype("int32")
strategy = tfring.RingStrategy()
out = os.environ["OUT"]


def model(embedding):
    if not embedding:
        return keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(3)])
    # A table of 64 rows looked up 4 times per row: its gradient is sparse (IndexedSlices).
    return keras.Sequential([keras.Input((4,), dtype="int32"), keras.layers.Embedding(64, 8),
                             keras.layers.Flatten(), keras.layers.Dense(3)])


class Doubling(keras.optimizers.SGD):
    """Changes the gradients after Keras clipped them (one process doubles the clipped gradients too)."""

    def _clip_gradients(self, grads):
        return [2 * g for g in super()._clip_gradients(grads)]


def run(name, rows, batch, clip, accumulate=None, loss_scale=False, embedding=False, eager=False, multi=False,
        optimizer=keras.optimizers.SGD):
    keras.utils.set_random_seed(1)
    x = (np.abs(X[:, :4]) * 20).astype("int32") % 64 if embedding else X
    with strategy.scope():
        m = model(embedding)
        opt = optimizer(0.5, momentum=0.9, gradient_accumulation_steps=accumulate, **clip)
        if loss_scale == "multi" or multi:  # the kernels' optimizer clips, the biases' does not
            biases = keras.optimizers.SGD(0.2)
            opt = keras.optimizers.MultiOptimizer(lambda v, kernels=opt: kernels if "kernel" in v.path else biases)
        if loss_scale == "nested":
            opt = keras.optimizers.LossScaleOptimizer(opt)
        if loss_scale:
            opt = keras.optimizers.LossScaleOptimizer(opt)
        m.compile(optimizer=opt, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  run_eagerly=eager)
    before = tfring.traffic()["allreduce"]["bytes"]
    m.fit(x[:rows], Y[:rows], batch_size=batch, epochs=2, shuffle=False, verbose=0)
    sent = tfring.traffic()["allreduce"]["bytes"] - before
    np.save(f"{out}/{name}-{strategy.rank}of{strategy.size}.npy",
            np.concatenate([v.numpy().ravel() for v in m.weights]))
    with open(f"{out}/{name}-{strategy.rank}of{strategy.size}.json", "w") as f:
        json.dump({"allreduce_bytes": sent}, f)


run("unclipped", 256, 64, {})
# Tight limits, so that every step clips.
run("clipnorm", 256, 64, {"clipnorm": 0.05})
run("global_clipnorm", 256, 64, {"global_clipnorm": 0.05})
run("clipvalue", 256, 64, {"clipvalue": 0.002})
run("eager", 128, 64, {"global_clipnorm": 0.05}, eager=True)
# 9 rows in batches of 8: with 2 ranks one rank holds no rows in every other step.
run("no_rows", 9, 8, {"global_clipnorm": 0.05})
run("accumulated", 256, 32, {"clipnorm": 0.05}, accumulate=2)
run("loss_scaled", 256, 64, {"global_clipnorm": 0.05}, loss_scale=True)
run("loss_scaled_unclipped", 256, 64, {}, loss_scale=True)
run("loss_scaled_no_rows", 9, 8, {}, loss_scale=True)
run("loss_scaled_accumulated", 256, 32, {"clipnorm": 0.05}, accumulate=2, loss_scale=True)
# Keras' own order (each rank checks its own gradients) where the record would not reach every
# optimizer that reduces.
run("multi", 256, 64, {"clipnorm": 0.05}, multi=True)
run("loss_scaled_multi", 256, 64, {"clipnorm": 0.05}, loss_scale="multi")
run("loss_scaled_nested", 256, 64, {"clipnorm": 0.05}, loss_scale="nested")
run("sparse_clipnorm", 256, 16, {"clipnorm": 0.05}, embedding=True)
run("changed_after_clipping", 256, 64, {"clipnorm": 0.05}, optimizer=Doubling)


class Observed(keras.layers.Layer):
    """A Dense whose `amax` variable is overwritten with its "gradient", as float8 training does
    with its scales: here the largest input this rank saw in the step."""

    def build(self, shape):
        self.kernel = self.add_weight(shape=(shape[-1], 3), initializer="glorot_uniform")
        self.amax = self.add_weight(shape=(), initializer="zeros")
        self.amax.overwrite_with_gradient = True

    def call(self, x):
        @tf.custom_gradient
        def observe(amax):
            return tf.identity(amax), lambda upstream: tf.reduce_max(tf.abs(x))

        return tf.matmul(x, self.kernel) + 0.0 * observe(self.amax)


def observed(name, loss_scale):
    keras.utils.set_random_seed(1)
    with strategy.scope():
        m = keras.Sequential([keras.Input((16,)), Observed()])
        opt = keras.optimizers.SGD(0.1)
        m.compile(optimizer=keras.optimizers.LossScaleOptimizer(opt) if loss_scale else opt,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    m.fit(X[:192], Y[:192], batch_size=64, epochs=1, shuffle=False, verbose=0)
    with open(f"{out}/{name}-{strategy.rank}of{strategy.size}.json", "w") as f:
        json.dump({"amax": float(m.layers[-1].amax.numpy())}, f)


observed("overwritten", False)
observed("overwritten_loss_scaled", True)
# 64 rows x 4 lookups a step, over twice the table's rows: unclipped, such a gradient is densified.
run("many_rows_global_clipnorm", 256, 64, {"global_clipnorm": 0.05}, embedding=True)
run("many_rows_clipvalue", 256, 64, {"clipvalue": 0.002}, embedding=True)
'''

CASES = ["clipnorm", "global_clipnorm", "clipvalue", "eager", "no_rows", "accumulated", "multi", "loss_scaled",
         "loss_scaled_unclipped", "loss_scaled_no_rows", "loss_scaled_accumulated", "loss_scaled_multi",
         "loss_scaled_nested", "sparse_clipnorm", "many_rows_global_clipnorm", "many_rows_clipvalue",
         "changed_after_clipping"]


@pytest.fixture(scope="module")
def results(warm, tmp_path_factory):
    out = tmp_path_factory.mktemp("clipping")
    warm.run_alone_then_jobs(SCRIPT, env={"OUT": str(out), "PYTHONWARNINGS": "ignore"})
    return out


@pytest.mark.parametrize("name", CASES)
def test_clipped_steps_equal_one_process(results, name):
    assert_ranks_equal_one_process(results, name, 2)


def test_gradients_are_all_reduced_once(results):
    """Reducing early adds no second reduction: the same bytes as without clipping or loss scaling."""
    def sent(name):
        return json.loads((results / f"{name}-0of2.json").read_text())["allreduce_bytes"]

    assert sent("unclipped") > 0
    for name in ("clipnorm", "global_clipnorm", "clipvalue"):
        assert sent(name) == sent("unclipped"), name
    # LossScaleOptimizer adds a 4-byte scalar per step (as it did before tfring reduced early);
    # a second reduction would add the gradients' bytes again (2,576 per step here).
    steps = 8
    for name in ("loss_scaled", "loss_scaled_unclipped"):
        assert sent(name) - sent("unclipped") == 4 * steps, name


def test_a_variable_overwritten_with_its_gradient_is_not_reduced_under_loss_scaling(results):
    """Keras never all-reduces such a variable's "gradient" (float8 scales); reducing early for
    LossScaleOptimizer leaves it alone too."""
    def amax(name, rank):
        return json.loads((results / f"{name}-{rank}of2.json").read_text())["amax"]

    for rank in range(2):
        assert amax("overwritten", rank) > 0
        assert amax("overwritten_loss_scaled", rank) == amax("overwritten", rank), rank


COMPRESSED = r'''
import os
import numpy as np
import tensorflow as tf
import keras
import tfring

tf.config.threading.set_intra_op_parallelism_threads(1)
rng = np.random.default_rng(0)
X = rng.standard_normal((256, 16)).astype("float32")
Y = X[:, :2] * 100.0  # gradients of ~100 that, scaled by 2^15, overflow float16 (max 65504)
strategy = tfring.RingStrategy(compression="fp16")
with strategy.scope():
    m = keras.Sequential([keras.Input((16,)), keras.layers.Dense(2)])
    opt = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(1e-4), dynamic_growth_steps=2)
    m.compile(optimizer=opt, loss="mse")
m.fit(X, Y, batch_size=64, epochs=2, shuffle=False, verbose=0)
print("SCALE", float(opt.dynamic_scale.numpy()), flush=True)
'''


def test_with_compression_the_loss_scale_moves_as_in_one_process(warm):
    """With a float16 wire, what travels is the unscaled gradients: the loss scale is not halved
    for overflows of the wire type that one process never sees."""
    alone, job = warm.run_alone(COMPRESSED, timeout=120), warm.run_job(2, COMPRESSED, timeout=120)
    assert alone.returncode == 0 and job.returncode == 0, (alone.stderr + job.stderr)[-3000:]
    scales = [line.split()[-1] for line in (alone.stdout + job.stdout).splitlines() if "SCALE" in line]
    assert len(scales) == 3 and len(set(scales)) == 1, scales
