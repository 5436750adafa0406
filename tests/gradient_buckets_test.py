"""Gradient buckets (`RingStrategy(bucket_bytes=...)`): each bucket's allreduce starts as soon as
its own gradients exist and travels while the rest of the backward pass runs; `fit` still equals
one process, on every rank alike, also when a rank has no rows in a step.
"""

import json

import pytest

from tfring_dev.testing import assert_ranks_equal_one_process
from tfring_dev.testing import run_job

pytestmark = pytest.mark.multiprocess

FIT = r'''
import json, os
import numpy as np
import tensorflow as tf
import keras
import tfring
from tfring.strategy.gradients import buckets as gradient_buckets

tf.config.threading.set_intra_op_parallelism_threads(1)
rng = np.random.default_rng(0)
X = rng.standard_normal((300, 8, 8, 3)).astype("float32")
Y = (X[:, :4].mean(axis=(1, 2, 3)) > 0).astype("int32") + (X[:, 4:, :, 0].mean(axis=(1, 2)) > 0.1).astype("int32")
out = os.environ["OUT"]


class NanOnEmpty(keras.layers.Layer):
    """x * w, whose gradient for w is NaN on a batch without rows (0 * the mean of nothing) and
    exactly that of x * w otherwise: what a rank without rows must not add to the sum."""

    def build(self, shape):
        self.w = self.add_weight(shape=shape[1:], initializer="ones")

    def call(self, x):
        return x * self.w + 0.0 * self.w * tf.reduce_mean(x)


def layers(conv):
    # TensorFlow's oneDNN Conv2D returns its input for an empty batch (TF 2.17), so the run where
    # a rank holds no rows uses dense layers only. (No batch normalization: it normalizes by each
    # rank's own rows, which one process does not.)
    if conv:
        return [keras.layers.Conv2D(8, 3, activation="relu"), keras.layers.Conv2D(8, 3, activation="relu"),
                keras.layers.Flatten()]
    return [keras.layers.Flatten(), keras.layers.Dense(48, activation="relu"), NanOnEmpty(),
            keras.layers.Dense(24, activation="relu")]


def run(name, bucket_bytes, rows, batch, conv=True):
    strategy = tfring.RingStrategy(bucket_bytes=bucket_bytes)
    keras.utils.set_random_seed(1)
    with strategy.scope():
        m = keras.Sequential([keras.Input((8, 8, 3))] + layers(conv) + [
                              keras.layers.Dense(32, activation="relu"), keras.layers.Dense(3)])
        m.compile(optimizer=keras.optimizers.Adam(0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    before = tfring.traffic()["allreduce"]["calls"]
    m.fit(X[:rows], Y[:rows], batch_size=batch, epochs=2, shuffle=False, verbose=0)
    calls = tfring.traffic()["allreduce"]["calls"] - before
    steps = 2 * -(-rows // batch)
    buckets = len(gradient_buckets.plan(m.trainable_weights, bucket_bytes))
    np.save(f"{out}/{name}-{strategy.rank}of{strategy.size}.npy", np.concatenate([v.numpy().ravel() for v in m.weights]))
    with open(f"{out}/{name}-{strategy.rank}of{strategy.size}.json", "w") as f:
        json.dump({"calls": calls, "steps": steps, "buckets": buckets}, f)


run("buckets", 1024, 256, 64)
run("one", 0, 256, 64)
# 9 rows in batches of 8: the second step holds one row, so with 2 ranks one rank has none.
run("no_rows", 2048, 9, 8, conv=False)
'''


@pytest.fixture(scope="module")
def results(warm, tmp_path_factory):
    out = tmp_path_factory.mktemp("buckets")
    env = {"OUT": str(out), "PYTHONWARNINGS": "ignore"}
    warm.run_alone_then_jobs(FIT, env=env)
    return out


@pytest.mark.parametrize("name", ["buckets", "one", "no_rows"])
def test_fit_with_buckets_equals_one_process(results, name):
    assert_ranks_equal_one_process(results, name, 2)


def test_each_bucket_is_one_collective_per_step(results):
    buckets, one = (json.loads((results / f"{n}-0of2.json").read_text()) for n in ("buckets", "one"))
    assert buckets["buckets"] >= 3, buckets  # the model's 8 gradients (~19 KiB) in 1 KiB buckets
    assert one["buckets"] == 1
    # Whatever else a step all-reduces (nothing in this model) is the same in both runs.
    others = one["calls"] - one["steps"]
    assert buckets["calls"] == others + buckets["steps"] * buckets["buckets"], (buckets, one)


OVERLAP = r'''
import os, time
import tensorflow as tf
import tfring

tfring.init()
WAIT, BUCKETS = float(os.environ["WAIT"]), os.environ["BUCKETS"] == "1"


def later_layers(x):
    """Stands for the rest of the backward pass: reports whether the first bucket's allreduce
    finished while it ran."""
    deadline = time.monotonic() + WAIT
    while tfring.traffic()["allreduce"]["calls"] < 1 and time.monotonic() < deadline:
        time.sleep(0.005)
    return x + 0.0, tfring.traffic()["allreduce"]["calls"] >= 1


# A TF1 graph: a tf.function's automatic control dependencies would order the py_function (a
# stateful op) before every later stateful op, the buckets' start ops among them.
with tf.Graph().as_default():
    a = tf.ones([1000]) * float(tfring.rank() + 1)
    b, overlapped = tf.py_function(later_layers, [tf.ones([10])], [tf.float32, tf.bool])
    if BUCKETS:
        reduced = tfring.ops.allreduce_buckets([[a], [b]])
    else:
        reduced = [tfring.ops.allreduce([a, b])]
    with tf.compat.v1.Session() as session:
        reduced, overlapped = session.run([reduced, overlapped])
assert reduced[0][0][0] == 3.0 and reduced[-1][-1][0] == 2.0, reduced
print("OVERLAPPED", bool(overlapped), flush=True)
'''


@pytest.mark.parametrize("buckets", [True, False])
def test_the_first_bucket_travels_while_later_gradients_are_computed(buckets):
    # With buckets, the first bucket's allreduce finishes while the later "layer" still runs;
    # one allreduce of both (the control) cannot start before it ends.
    env = {"WAIT": "20" if buckets else "2", "BUCKETS": "1" if buckets else "0"}
    proc = run_job(2, OVERLAP, env=env, timeout=120)  # counts collectives since init: a fresh job
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count(f"OVERLAPPED {buckets}") == 2, proc.stdout[-2000:]


STRUCTURE = r'''
import tensorflow as tf
import keras
import tfring

strategy = tfring.RingStrategy(bucket_bytes=1024)
with strategy.scope():
    m = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(8, 3, activation="relu"),
                          keras.layers.Conv2D(8, 3, activation="relu"), keras.layers.Flatten(),
                          keras.layers.Dense(32, activation="relu"), keras.layers.Dense(3)])
    m.compile(optimizer=OPTIMIZER, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    m.optimizer.build(m.trainable_variables)  # as fit does before it traces the step


@tf.function
def step(x, y):
    return strategy.run(m.train_step, args=((x, y),))


graph = step.get_concrete_function(tf.TensorSpec([None, 8, 8, 3]), tf.TensorSpec([None], tf.int32)).graph


def ancestors(op):
    seen, todo = set(), [op]
    while todo:
        o = todo.pop()
        for p in [t.op for t in o.inputs] + list(o.control_inputs):
            if p not in seen:
                seen.add(p)
                todo.append(p)
    return seen


starts = [op for op in graph.get_operations() if op.type == "TfringAllreduceStart"]
first_layer = [op for op in graph.get_operations() if op.type == "Conv2DBackpropFilter"][-1]
print("STARTS", len(starts))
print("FIRST BUCKET WAITS FOR THE FIRST LAYER", first_layer in ancestors(starts[0]))
print("LAST BUCKET WAITS FOR THE FIRST LAYER", first_layer in ancestors(starts[-1]))
'''


@pytest.mark.parametrize("optimizer", ['"adam"', "keras.optimizers.Adam(global_clipnorm=1.0)",
                                       "keras.optimizers.Adam(clipnorm=1.0)",
                                       "keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam())"])
def test_in_a_keras_step_the_first_bucket_waits_only_for_its_own_gradients(warm, optimizer):
    """Also with clipping and loss scaling: the job's gradients are clipped or checked for
    finiteness after their buckets are reduced, so neither holds every bucket back until the last
    gradient exists."""
    proc = warm.run_job(2, STRUCTURE.replace("OPTIMIZER", optimizer), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "FIRST BUCKET WAITS FOR THE FIRST LAYER False" in out, out[-2000:]
    assert "LAST BUCKET WAITS FOR THE FIRST LAYER True" in out, out[-2000:]
    starts = int(out.split("STARTS ")[1].split()[0])
    assert starts >= 3, out[-2000:]
