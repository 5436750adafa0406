"""Adasum across real ranks: `tfring.ops.allreduce(op="adasum")` and `hvd.allreduce(op=hvd.Adasum)`
against a NumPy reference on 2 and 4 ranks (3 refused on every rank); SGD steps of
`RingStrategy(compression="adasum")` (`fit`: one plain step, three with momentum; a custom
`train_step`; a layer's `add_loss`; a custom loop), Horovod's `DistributedOptimizer(op=hvd.Adasum)`
and `DistributedGradientTape(op=hvd.Adasum)` against the Adasum of the ranks' own gradients
computed in NumPy."""

import pytest

from tfring_dev.testing import rank_lines
from tfring_dev.testing import run_job

pytestmark = pytest.mark.multiprocess

REFERENCE = r'''
import numpy as np

def adasum_pair(a, b):
    dot, aa, bb = float(np.dot(a, b)), float(np.dot(a, a)), float(np.dot(b, b))
    ca = 1 - dot / (2 * aa) if aa > 0 else 1.0
    cb = 1 - dot / (2 * bb) if bb > 0 else 1.0
    return ca * a + cb * b

def adasum(vectors):
    """Horovod's order: (0, 1), (2, 3), then the pairs' results, ...; float64, unrounded."""
    vectors = [np.asarray(v, np.float64).ravel() for v in vectors]
    level = 1
    while level < len(vectors):
        for lower in range(0, len(vectors), 2 * level):
            vectors[lower] = adasum_pair(vectors[lower], vectors[lower + level])
        level *= 2
    return vectors[0]
'''

OPS = REFERENCE + r'''
import hashlib
import tensorflow as tf
import tfring
import tfring.horovod.tensorflow as hvd

hvd.init()
rank, size = hvd.rank(), hvd.size()
COUNTS = [5, 0, 300, 1]
DTYPES = [np.float16, tf.bfloat16.as_numpy_dtype, np.float32, np.float64]
RTOL = {np.float16: 4e-3, np.float32: 1e-6, np.float64: 1e-12}

def value(r, t, n, dtype):
    i = np.arange(n)
    return (np.sin(0.7 * i + 1.3 * t) + 0.6 * np.cos(0.37 * i * (r + 1) + r)).astype(dtype)

if size & (size - 1):
    try:
        tfring.ops.allreduce(tf.ones([3]), op="adasum")
        print("no error")
    except tf.errors.InvalidArgumentError as e:
        print("ops refused:", e.message)
    try:
        hvd.allreduce(tf.ones([3]), op=hvd.Adasum)
    except NotImplementedError as e:
        print("hvd refused:", e)
    print("same after:", tfring.ops.allreduce(tf.ones([2]), op="sum").numpy().tolist())
    raise SystemExit(0)

fused = tf.function(lambda ts: tfring.ops.allreduce(ts, op="adasum"))
digest = hashlib.sha256()
bad = []
for dtype in DTYPES:
    tensors = [tf.constant(value(rank, t, n, dtype)) for t, n in enumerate(COUNTS)]
    for how, out in (("eager", tfring.ops.allreduce(tensors, op="adasum")), ("graph", fused(tensors))):
        for t, (n, got) in enumerate(zip(COUNTS, out)):
            want = adasum([value(r, t, n, dtype).astype(np.float64) for r in range(size)])
            got = got.numpy()
            digest.update(got.tobytes())
            scale = max(1.0, float(np.max(np.abs(want)))) if n else 1.0
            tol = RTOL.get(dtype, 3e-2) * scale * size
            if got.shape != (n,) or got.dtype != np.dtype(dtype) or not np.allclose(got.astype(np.float64), want, rtol=0, atol=tol):
                bad.append(f"{how} {np.dtype(dtype).name} tensor {t}: {got[:3]} vs {want[:3]}")
x = tf.constant(value(rank, 0, 50, np.float32))
got = hvd.allreduce(x, op=hvd.Adasum, prescale_factor=2.0).numpy()
want = 2 * adasum([value(r, 0, 50, np.float32) for r in range(size)])
if not np.allclose(got, want, rtol=1e-5, atol=1e-6):
    bad.append(f"hvd prescaled: {got[:3]} vs {want[:3]}")
print("bad:", bad)
print("digest:", digest.hexdigest())
'''


@pytest.mark.parametrize("size", [2, 4])
def test_adasum_on_2_and_4_ranks_matches_numpy_and_ranks_agree_bitwise(warm, size):
    proc = warm.run_job(size, OPS, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    digests = set()
    for r in range(size):
        lines = rank_lines(proc.stdout, r)
        assert "bad: []" in lines, lines
        digests.update(line for line in lines if line.startswith("digest:"))
    assert len(digests) == 1, digests


def test_adasum_on_3_ranks_is_refused_on_every_rank_which_goes_on(warm):
    proc = warm.run_job(3, OPS, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for r in range(3):
        lines = "\n".join(rank_lines(proc.stdout, r))
        assert "ops refused:" in lines and "needs a power of two of them (1, 2, 4, 8, ...), not 3" in lines, lines
        assert "hvd refused: hvd.allreduce: Running Adasum with non-power of 2 ranks" in lines, lines
        assert "same after: [3.0, 3.0]" in lines, lines


TRAINING = REFERENCE + r'''
import hashlib
import os
import keras
import tensorflow as tf
import tfring

HOW = os.environ["HOW"]
LR = 0.5
STEPS, MOMENTUM = (3, 0.9) if HOW == "momentum_steps" else (1, 0.0)  # 8 rows a step, 4 a rank
rows = np.random.default_rng(3).normal(size=(8 * STEPS, 6)).astype(np.float32)
labels = np.random.default_rng(4).normal(size=(8 * STEPS, 2)).astype(np.float32)
# Rank 1's rows point elsewhere, so that the ranks' gradients are neither parallel nor orthogonal.
for s in range(STEPS):
    rows[8 * s + 4:8 * s + 8] *= np.array([1, -2, 0.5, 3, -1, 1], np.float32)

class CustomStep(keras.Sequential):  # keras-io's "customizing what happens in fit()"
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = self.compute_loss(y=y, y_pred=self(x, training=True))
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return {"loss": loss}

def make(cls=keras.Sequential):
    keras.utils.set_random_seed(1)
    extra = [keras.layers.ActivityRegularization(l2=0.05)] if HOW == "add_loss" else []  # a layer's add_loss
    return cls([keras.Input((6,)), keras.layers.Dense(3, activation="tanh")] + extra + [keras.layers.Dense(2)])

if HOW in ("strategy", "train_step", "add_loss", "momentum_steps"):
    strategy = tfring.RingStrategy(compression="adasum")
    rank, size = strategy.rank, strategy.size
    with strategy.scope():
        model = make(CustomStep if HOW == "train_step" else keras.Sequential)
        model.compile(optimizer=keras.optimizers.SGD(LR, momentum=MOMENTUM), loss="mse")
    start = [w.copy() for w in model.get_weights()]
    model.fit(rows, labels, batch_size=8, epochs=1, shuffle=False, verbose=0)
elif HOW == "strategy_loop":  # keras-io's custom loop: strategy.run, a loss over the global batch
    strategy = tfring.RingStrategy(compression="adasum")
    rank, size = strategy.rank, strategy.size
    with strategy.scope():
        model = make()
        opt = keras.optimizers.SGD(LR)
    start = [w.copy() for w in model.get_weights()]
    ds = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices((rows, labels)).batch(8))

    @tf.function
    def step(x, y):
        def replica(x, y):
            with tf.GradientTape() as tape:
                per_row = keras.losses.MeanSquaredError(reduction=None)(y, model(x))
                loss = tf.nn.compute_average_loss(per_row, global_batch_size=8)
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
        strategy.run(replica, args=(x, y))

    for x, y in ds:
        step(x, y)
else:
    import tfring.horovod.keras as hvd
    import tfring.horovod.tensorflow as hvd_tf
    from tfring.horovod.tensorflow import Adasum  # as Horovod's keras module, it exports Average and Sum only
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    model = make()
    start = [w.copy() for w in model.get_weights()]
    mine = slice(4 * rank, 4 * rank + 4)
    if HOW == "optimizer":
        model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(LR), op=Adasum), loss="mse")
        model.fit(rows[mine], labels[mine], batch_size=4, epochs=1, shuffle=False, verbose=0)
    else:
        opt = keras.optimizers.SGD(LR)
        with tf.GradientTape() as tape:
            loss = keras.losses.MeanSquaredError()(labels[mine], model(rows[mine]))
        tape = hvd_tf.DistributedGradientTape(tape, op=Adasum)
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))

# The reference: each rank's own gradient (mean loss over its 4 rows), combined in NumPy, and
# Keras' SGD (v <- m v - lr g; w <- w + v) in float32, step after step.
def trajectory(combine):
    plain = make()
    weights, velocity = [w.copy() for w in start], [np.zeros_like(w) for w in start]
    for s in range(STEPS):
        plain.set_weights(weights)
        grads = []
        for r in range(size):
            mine = slice(8 * s + 4 * r, 8 * s + 4 * r + 4)
            with tf.GradientTape() as tape:
                loss = keras.losses.MeanSquaredError()(labels[mine], plain(rows[mine])) + sum(plain.losses)
            grads.append([g.numpy() for g in tape.gradient(loss, plain.trainable_variables)])
        for k, w in enumerate(weights):
            g = combine([grads[r][k] for r in range(size)]).reshape(w.shape).astype(np.float32)
            velocity[k] = MOMENTUM * velocity[k] - np.float32(LR) * g
            weights[k] = w + velocity[k]
    return weights

def gap(reference):
    return max(float(np.max(np.abs(w - v))) for w, v in zip(model.get_weights(), reference))

worst, mean_gap = gap(trajectory(adasum)), gap(trajectory(lambda gs: sum(gs) / size))
print(f"adasum gap {worst:.3g} mean gap {mean_gap:.3g}")
print("weights:", hashlib.sha256(np.concatenate([w.ravel() for w in model.get_weights()]).tobytes()).hexdigest())
'''


@pytest.mark.parametrize("how", ["strategy", "train_step", "add_loss", "momentum_steps", "strategy_loop", "optimizer",
                                 "tape"])
def test_sgd_steps_move_by_the_adasum_of_the_ranks_own_gradients(how):
    # Fresh processes: a warm one where an earlier script installed RingStrategy refuses the plain
    # models of the Horovod cases (and RingStrategy stays installed after the strategy cases).
    proc = run_job(2, TRAINING, env={"HOW": how}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    weights = set()
    for r in range(2):
        lines = rank_lines(proc.stdout, r)
        gaps = [line.split() for line in lines if line.startswith("adasum gap")][0]
        assert float(gaps[2]) < 1e-6, lines
        assert float(gaps[5]) > 1e-3, lines  # and the step is not the mean's: the test tells them apart
        weights.update(line for line in lines if line.startswith("weights:"))
    assert len(weights) == 1, weights


SPARSE = r'''
import os
import keras
import numpy as np
import tensorflow as tf
import tfring

strategy = tfring.RingStrategy(compression="adasum", sparse_as_dense=os.environ["DENSE"] == "1")
with strategy.scope():
    model = keras.Sequential([keras.Input((3,), dtype="int32"), keras.layers.Embedding(10, 4),
                              keras.layers.Flatten(), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
try:
    model.fit(np.arange(24).reshape(8, 3) % 10, np.ones((8, 1)), batch_size=8, epochs=1, verbose=0)
    print("trained")
except NotImplementedError as e:
    print("refused:", e)
'''


@pytest.mark.parametrize("dense", ["0", "1"])
def test_adasum_refuses_sparse_gradients_unless_they_travel_dense(dense):
    proc = run_job(2, SPARSE, env={"DENSE": dense}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for r in range(2):
        lines = "\n".join(rank_lines(proc.stdout, r))
        if dense == "1":
            assert "trained" in lines, lines
        else:
            assert "refused: tfring: Adasum combines dense gradients only" in lines, lines
            assert "sparse_as_dense=True" in lines, lines
