"""RingStrategy with Keras 3: training on 2 ranks equals training in one process."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tfring_dev.testing import QUIET_ENV
from tfring_dev.testing import rank_lines
from tfring_dev.testing import run_job

pytestmark = pytest.mark.multiprocess

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
def test_two_ranks_equal_one_process(warm, tmp_path, opt, source):
    env = {"OPT": opt, "INPUT": source, "OUT": str(tmp_path)}
    _single(tmp_path, env)
    proc = warm.run_job(2, FIT, env=env, timeout=600)
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


CUSTOM = r'''
import json
import numpy as np
import tensorflow as tf
import keras
import tfring

tf.config.threading.set_intra_op_parallelism_threads(1)
strategy = tfring.RingStrategy()
rank, size = strategy.rank, strategy.size
print("REPLICAS", strategy.num_replicas_in_sync)

# Variables start identical on every rank even when each rank initialises them differently.
keras.utils.set_random_seed(100 + rank)
with strategy.scope():
    v = tf.Variable(tf.random.normal([4]))
    layer = keras.layers.Dense(3)
    layer.build((None, 5))
g = tfring.ops.allgather(tf.reshape(tf.concat([v, tf.reshape(layer.kernel, [-1])], 0), [1, -1]))
print("SAME_INIT", bool(np.all(g.numpy() == g.numpy()[0])))

# A custom loop: experimental_distribute_dataset + run + reduce.
x = np.arange(32, dtype="float32").reshape(16, 2)
ds = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices(x).batch(8))
total = 0.0
for batch in ds:
    local = strategy.run(lambda b: tf.reduce_sum(b), args=(batch,))
    total += float(strategy.reduce("SUM", local, axis=None))
print("CUSTOM_SUM", total, float(x.sum()))

# distribute_datasets_from_function: the InputContext says who we are.
seen = []
def dataset_fn(ctx):
    seen.append((ctx.num_input_pipelines, ctx.input_pipeline_id, ctx.get_per_replica_batch_size(8)))
    return tf.data.Dataset.from_tensor_slices(x).shard(ctx.num_input_pipelines, ctx.input_pipeline_id).batch(4)
dist = strategy.distribute_datasets_from_function(dataset_fn)
total = sum(float(strategy.reduce("SUM", strategy.run(tf.reduce_sum, args=(b,)), axis=None)) for b in dist)
print("CONTEXT", seen[0], total)

# Step outputs: every rank holds every rank's value in rank order; the scalars of one dtype travel
# in one allgather (a float vector takes two: its rows, then how many each rank has).
@tf.function
def outputs_step():
    return strategy.run(lambda: {"a": tf.constant(1.0) * (rank + 1), "b": tf.constant(10.0) * (rank + 1),
                                 "n": tf.constant(rank, tf.int64), "v": tf.fill([rank + 1], float(rank)),
                                 "ok": tf.constant(rank == 0), "s": tf.constant("text")})
before = tfring.traffic()["allgather"]["calls"]
out = outputs_step()
calls = tfring.traffic()["allgather"]["calls"] - before
local = {k: [np.asarray(p).tolist() for p in strategy.experimental_local_results(v)] for k, v in out.items() if k != "s"}
print("OUTPUTS", json.dumps(local, sort_keys=True), calls, out["s"].numpy().decode())

# A model with a custom train_step that asks the replica context for the gradient all-reduce.
class Custom(keras.Model):
    def train_step(self, data):
        xb, yb = data
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self(xb) - yb)) / strategy.num_replicas_in_sync
        grads = tape.gradient(loss, self.trainable_variables)
        grads = tf.distribute.get_replica_context().all_reduce("sum", grads)
        for gr, var in zip(grads, self.trainable_variables):
            var.assign_sub(0.1 * gr)
        return {"loss": loss * strategy.num_replicas_in_sync}

keras.utils.set_random_seed(3)
with strategy.scope():
    inp = keras.Input((2,))
    m = Custom(inp, keras.layers.Dense(1)(inp))
    m.compile()
m.fit(x / 32, x[:, :1] / 32, batch_size=8, epochs=2, verbose=0, shuffle=False)
w = np.concatenate([t.numpy().ravel() for t in m.weights])
gw = tfring.ops.allgather(tf.reshape(w, [1, -1])).numpy()
print("CUSTOM_STEP_SAME", bool(np.all(gw == gw[0])), np.round(w, 5).tolist())
'''


def _custom_loop_job(warm, ranks):
    """Runs CUSTOM on `ranks` ranks, checks what every rank printed, returns rank 0's weights."""
    proc = warm.run_job(ranks, CUSTOM)
    assert proc.returncode == 0, proc.stderr[-3000:]
    weights = []
    for r in range(ranks):
        lines = rank_lines(proc.stdout, r)
        assert f"REPLICAS {ranks}" in lines
        assert "SAME_INIT True" in lines
        assert "CUSTOM_SUM 496.0 496.0" in lines
        assert "CONTEXT (%d, %d, %d) 496.0" % (ranks, r, 8 // ranks) in lines
        outputs = [l for l in lines if l.startswith("OUTPUTS ")]
        if ranks == 2:
            assert outputs == ['OUTPUTS {"a": [1.0, 2.0], "b": [10.0, 20.0], "n": [0, 1], "ok": [false, false], '
                               '"v": [[0.0], [1.0, 1.0]]} 4 text'], lines
        step = [l for l in lines if l.startswith("CUSTOM_STEP_SAME True")]
        assert step, lines
        weights.append(json.loads(step[0].split(" ", 2)[2]))
    return weights[0]


def test_custom_loops_variables_and_train_step_on_one_and_two_ranks(warm):
    # Custom loops work on 1 and on 2 ranks, and the custom train_step on the same global batches
    # ends with the same weights on both.
    one = _custom_loop_job(warm, 1)
    two = _custom_loop_job(warm, 2)
    np.testing.assert_allclose(two, one, rtol=0, atol=1e-5)


BAD = r'''
import os
import numpy as np
import tensorflow as tf
import keras
import tfring

tf.config.threading.set_intra_op_parallelism_threads(1)
case = os.environ["CASE"]
strategy = tfring.RingStrategy(compression=os.environ.get("COMPRESSION") or None)
keras.utils.set_random_seed(0)
x = np.random.default_rng(0).standard_normal((96, 4)).astype("float32")
y = x[:, :1] * 2
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", jit_compile=(case == "xla"))
try:
    if case == "odd_batch":
        # A short last batch splits unevenly (exactly: see test_uneven_batches); a global batch
        # size that does not divide into the ranks is refused.
        model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(33, drop_remainder=True), epochs=1, verbose=0)
    elif case == "unbatched":
        model.fit(tf.data.Dataset.from_tensor_slices((x, y)), epochs=1, verbose=0)
    elif case == "unbatched_same_width":  # rows of 4 features and 4 targets look like batches of 4
        model.fit(tf.data.Dataset.from_tensor_slices((x, x)).shuffle(8), epochs=1, verbose=0)
    elif case == "xla":
        model.fit(x, y, batch_size=32, epochs=1, verbose=0)
    elif case == "outside_scope":
        loose = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        loose.compile(optimizer="sgd", loss="mse")
        loose.fit(x, y, batch_size=32, epochs=1, verbose=0)
    elif case == "steps":
        n = 64 if strategy.rank == 0 else 96      # rank 1 has one more global batch
        model.fit(tf.data.Dataset.from_tensor_slices((x[:n], y[:n])).batch(32), epochs=1, verbose=0)
    elif case == "compression":
        print("INITIAL", float(model.evaluate(x, y, verbose=0)))
        model.fit(x, y, batch_size=32, epochs=10, verbose=0, shuffle=False)
        w = np.concatenate([t.numpy().ravel() for t in model.weights])
        g = tfring.ops.allgather(tf.reshape(w, [1, -1])).numpy()
        print("IDENTICAL", bool(np.all(g == g[0])), "LOSS", float(model.evaluate(x, y, verbose=0)))
    print("NO ERROR")
except Exception as e:
    print("ERROR", type(e).__name__, str(e).replace("\n", " ")[:4000])
'''


@pytest.mark.parametrize("case,needle", [
    ("odd_batch", "divide evenly among the 2 ranks"),
    ("unbatched", "must be batched"),
    ("unbatched_same_width", "must be batched"),
    ("xla", "jit_compile=False"),
    ("outside_scope", "built outside `strategy.scope()`"),
])
def test_bad_input_gives_clear_errors(case, needle):
    proc = run_job(2, BAD, env={"CASE": case}, timeout=300)
    out = proc.stdout
    for r in range(2):
        lines = [l for l in out.splitlines() if l.startswith(f"[{r}] ERROR")]
        assert lines and needle in lines[0], (out, proc.stderr[-2000:])


def test_ranks_with_different_numbers_of_steps_fail_within_the_timeout():
    proc = run_job(2, BAD, env={"CASE": "steps", "TFRING_TIMEOUT": "10"}, timeout=300)
    errors = [l for l in proc.stdout.splitlines() if " ERROR " in l]
    assert errors, (proc.stdout, proc.stderr[-2000:])
    assert any("different numbers of steps" in l for l in errors), errors


def test_fp16_compression_trains_and_keeps_ranks_identical(warm):
    proc = warm.run_job(2, BAD, env={"CASE": "compression", "COMPRESSION": "fp16"}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [l for l in proc.stdout.splitlines() if "IDENTICAL" in l]
    assert len(lines) == 2 and all("IDENTICAL True" in l for l in lines), proc.stdout
    loss = float(lines[0].split("LOSS")[1])
    initial = float([l for l in proc.stdout.splitlines() if "INITIAL" in l][0].split("INITIAL")[1])
    assert loss < 0.1 * initial, (initial, loss)  # y = 2 * x0 is learnable


def test_bad_compression_argument():
    import tfring

    with pytest.raises(ValueError, match="compression must be"):
        tfring.RingStrategy(compression="int8")


MIXED = r'''
import os
import numpy as np
import tensorflow as tf
import keras
import tfring

tf.config.threading.set_intra_op_parallelism_threads(1)
keras.mixed_precision.set_global_policy("mixed_float16")
strategy = tfring.RingStrategy()
keras.utils.set_random_seed(0)
x = np.random.default_rng(0).standard_normal((128, 4)).astype("float32")
y = x[:, :1] * 2
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(1, dtype="float32")])
    opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.05))
    model.compile(optimizer=opt, loss="mse")
before = float(model.evaluate(x, y, verbose=0))
model.fit(x, y, batch_size=32, epochs=3, verbose=0, shuffle=False)
after = float(model.evaluate(x, y, verbose=0))
w = lambda: np.concatenate([v.numpy().astype("float64").ravel() for v in model.trainable_weights])
g = tfring.ops.allgather(tf.reshape(tf.constant(w()), [1, -1])).numpy()
print("MP_IDENTICAL", bool(np.all(g == g[0])), "IMPROVED", after < 0.5 * before)
# One step whose gradients overflow on rank 1 only (its slice of the global batch is huge):
# every rank must skip it, keep identical weights, and lower the loss scale.
scale = float(opt.dynamic_scale.numpy())
w0 = w()
xb = np.ones((32, 4), "float32")
xb[16:] = 6e4
model.fit(xb, np.ones((32, 1), "float32"), batch_size=32, epochs=1, verbose=0, shuffle=False)
g = tfring.ops.allgather(tf.reshape(tf.constant(w()), [1, -1])).numpy()
print("SKIPPED", bool(np.array_equal(w(), w0)), "SAME", bool(np.all(g == g[0])),
      "SCALE_DOWN", float(opt.dynamic_scale.numpy()) < scale)
'''


def test_mixed_float16_loss_scaling_decides_finiteness_for_all_ranks(warm):
    proc = warm.run_job(2, MIXED, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for r in range(2):
        lines = [l.split("] ", 1)[1] for l in proc.stdout.splitlines() if l.startswith(f"[{r}] ")]
        assert "MP_IDENTICAL True IMPROVED True" in lines, lines
        assert "SKIPPED True SAME True SCALE_DOWN True" in lines, lines


BATCHNORM = r'''
import os
import numpy as np
import tensorflow as tf
import keras
import tfring

tf.config.threading.set_intra_op_parallelism_threads(1)
keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = (rng.standard_normal((256, 4)) * [1, 2, 3, 4] + [5, -1, 0, 2]).astype("float32")
y = (x.sum(1, keepdims=True) > 6).astype("float32")
strategy = tfring.RingStrategy()
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.BatchNormalization(momentum=0.5), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
model.fit(x, y, batch_size=64, epochs=2, verbose=0, shuffle=False)
bn = model.layers[0]
stats = np.concatenate([np.asarray(bn.moving_mean), np.asarray(bn.moving_variance)])
np.save(os.path.join(os.environ["OUT"], f"bn{strategy.rank}of{strategy.size}.npy"), stats)
'''


def test_batch_norm_moving_statistics_are_averaged_across_ranks(warm, tmp_path):
    env = {"OUT": str(tmp_path)}
    script = tmp_path / "bn.py"
    script.write_text(BATCHNORM)
    full = {k: v for k, v in dict(os.environ, **QUIET_ENV, **env).items() if not k.startswith("TFRING_")}
    one = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=full, timeout=600)
    assert one.returncode == 0, one.stderr[-3000:]
    proc = warm.run_job(2, BATCHNORM, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    single, r0, r1 = (np.load(tmp_path / f) for f in ("bn0of1.npy", "bn0of2.npy", "bn1of2.npy"))
    assert np.array_equal(r0, r1), "moving statistics differ between ranks"
    # Normalisation uses each replica's batch statistics; the moving mean is the mean of per-replica
    # means, which over equal slices is the global-batch mean — but the weights it normalises for
    # differ slightly from one process, so compare loosely; the variance (mean of per-replica
    # variances) is smaller than the global-batch variance by the spread of the slice means.
    np.testing.assert_allclose(r0[:4], single[:4], rtol=0.05, atol=0.05)
    assert np.all(r0[4:] <= single[4:] * 1.05)


STATISTICS = r'''
import json, os
import numpy as np
import tensorflow as tf
import keras
import tfring

tf.config.threading.set_intra_op_parallelism_threads(1)
keras.utils.set_random_seed(0)


class Running(keras.layers.Layer):
    """Running statistics that a step reads right after assigning them (a layer called twice)."""

    def build(self, shape):
        self.mean = self.add_weight(shape=shape[1:], initializer="zeros", trainable=False, name="mean")
        self.seen = self.add_weight(shape=(), initializer="zeros", trainable=False, name="seen")

    def call(self, x, training=False):
        if training:
            self.mean.assign(self.mean * 0.5 + tf.reduce_mean(x, axis=0) * 0.5)
            self.seen.assign_add(tf.reduce_mean(x))
        return x + self.mean * self.seen  # read after the assignments


class Net(keras.Model):
    def __init__(self):
        super().__init__()
        self.running = Running()
        self.inner = Running()
        self.head = keras.layers.Dense(1)

    def call(self, x, training=False):
        h = self.running(x, training=training)
        h = self.running(h * 0.5, training=training)  # the same layer again: its statistics are read
        h = self.inner(h, training=training)
        h = tf.cond(tf.reduce_sum(h) > -1e30, lambda: self.inner(h, training=training),
                    lambda: self.inner(h * 2.0, training=training))  # read and assigned in a nested graph
        return self.head(self.inner(h, training=training))  # and once more outside it


rng = np.random.default_rng(0)
x = (rng.standard_normal((64, 3)) + [1.0, -2.0, 0.5]).astype("float32")
y = x.sum(1, keepdims=True).astype("float32")
strategy = tfring.RingStrategy()
with strategy.scope():
    model = Net()
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
model.fit(x, y, batch_size=16, epochs=1, verbose=0, shuffle=False)
before = tfring.traffic()["allreduce"]["calls"] if strategy.size > 1 else 0
model.fit(x, y, batch_size=16, epochs=1, verbose=0, shuffle=False)
calls = (tfring.traffic()["allreduce"]["calls"] - before) if strategy.size > 1 else 0
values = {v.path: np.asarray(v).tolist() for v in model.weights}
print("RESULT " + json.dumps({"rank": strategy.rank, "size": strategy.size, "weights": values,
                              "allreduces_per_step": calls / 4}))
'''


def test_statistics_read_inside_the_step_see_every_earlier_assignment(warm):
    # Statistics wait for one collective at the step's end; a read of a waiting one (a layer called
    # twice, a read after an assign_add, a batch norm inside a tf.cond and again outside) first
    # reduces and assigns them, so the job follows one process's sequence of reads and writes.
    alone = warm.run_alone(STATISTICS)
    assert alone.returncode == 0, alone.stderr[-3000:]
    job = warm.run_job(2, STATISTICS)
    assert job.returncode == 0, job.stderr[-3000:]
    one = json.loads(next(line for line in alone.stdout.splitlines() if line.startswith("RESULT "))[7:])
    ranks = [json.loads(next(line for line in rank_lines(job.stdout, r) if line.startswith("RESULT "))[7:])
             for r in range(2)]
    assert ranks[0]["weights"] == ranks[1]["weights"], "ranks differ"
    assert sorted(one["weights"]) == sorted(ranks[0]["weights"])
    for name, value in one["weights"].items():
        # The statistics are means over the rows: the mean of the ranks' means is the global one up
        # to rounding. A read that missed an assignment would be off by far more.
        np.testing.assert_allclose(ranks[0]["weights"][name], value, rtol=1e-5, atol=1e-6, err_msg=name)
    # The step's own statistics travel together: fewer collectives than its 12 assignments (the
    # reads force 4 early reductions; the 2 inside the tf.cond are reduced at once).
    assert ranks[0]["allreduces_per_step"] <= 9, ranks[0]["allreduces_per_step"]


STALE_READ = r'''
import numpy as np
import tensorflow as tf
import keras
import tfring

tf.config.threading.set_intra_op_parallelism_threads(1)


class Running(keras.layers.Layer):
    def build(self, shape):
        self.mean = self.add_weight(shape=shape[1:], initializer="zeros", trainable=False, name="mean")

    @tf.function
    def current(self):
        return self.mean + 0.0

    def call(self, x, training=False):
        before = self.current()  # traced here, before the assignment
        if training:
            self.mean.assign(self.mean * 0.5 + tf.reduce_mean(x, axis=0) * 0.5)
        return x + before + self.current()  # the same traced function: it bypasses the variable


strategy = tfring.RingStrategy()
with strategy.scope():
    model = keras.Sequential([keras.Input((3,)), Running(), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
x = np.ones((16, 3), "float32")
model.fit(x, x[:, :1], batch_size=8, epochs=1, verbose=0)
print("TRAINED")
'''


def test_a_statistic_read_past_the_variable_fails_saying_so():
    # A tf.function traced before the assignment and called again after it reads the variable's
    # handle directly: it would see the value from before the step's reduction, so the step refuses.
    job = run_job(2, STALE_READ, env=QUIET_ENV, timeout=300)
    assert job.returncode != 0 and "TRAINED" not in job.stdout
    assert "reads the variable" in job.stderr and "traced before and called again" in job.stderr, job.stderr[-3000:]


SHARDS = r'''
import glob, json, os
import numpy as np
import tensorflow as tf
import keras
import tfring

tf.config.threading.set_intra_op_parallelism_threads(1)
strategy = tfring.RingStrategy()
files = sorted(glob.glob(os.path.join(os.environ["DATA"], "*.tfrecord")))[:int(os.environ["FILES"])]
spec = {"id": tf.io.FixedLenFeature([], tf.int64), "x": tf.io.FixedLenFeature([2], tf.float32)}

@tf.autograph.experimental.do_not_convert
def parse(record):
    ex = tf.io.parse_single_example(record, spec)
    return ex["x"] / 100.0, tf.cast(ex["id"], tf.float32)

def make(kind):
    if kind == "reader":
        return tf.data.TFRecordDataset(files).map(parse).batch(4)
    return (tf.data.Dataset.from_tensor_slices(files)
            .interleave(tf.data.TFRecordDataset, cycle_length=2, num_parallel_calls=2).map(parse).batch(4))

for kind in ("reader", "interleave"):
    batches = [strategy.experimental_local_results(b[1])[0].numpy().astype(int).tolist()
               for b in strategy.experimental_distribute_dataset(make(kind))]
    print("BATCHES", kind, json.dumps(batches))

with strategy.scope():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
hist = model.fit(make("reader").map(lambda x, y: (x, y / 100.0)), epochs=2, verbose=0)
w = np.concatenate([v.numpy().ravel() for v in model.weights])
g = tfring.ops.allgather(tf.reshape(w, [1, -1])).numpy()
print("FIT", bool(np.all(g == g[0])), bool(np.isfinite(hist.history["loss"][-1])))
'''


def _write_shards(directory, files=4, per_file=8):
    import tensorflow as tf

    for f in range(files):
        with tf.io.TFRecordWriter(str(directory / f"part-{f}.tfrecord")) as w:
            for i in range(per_file):
                ident = 100 * f + i
                feature = {"id": tf.train.Feature(int64_list=tf.train.Int64List(value=[ident])),
                           "x": tf.train.Feature(float_list=tf.train.FloatList(value=[ident, 1.0]))}
                w.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())


@pytest.mark.parametrize("files", [4, 1])
def test_input_sharded_by_file_when_there_are_enough_files(warm, tmp_path, files):
    _write_shards(tmp_path)
    proc = warm.run_job(2, SHARDS, env={"DATA": str(tmp_path), "FILES": str(files)}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = {}
    for r in range(2):
        lines = [l.split("] ", 1)[1] for l in proc.stdout.splitlines() if l.startswith(f"[{r}] ")]
        assert "FIT True True" in lines, lines
        for line in lines:
            if line.startswith("BATCHES"):
                _, kind, batches = line.split(" ", 2)
                seen[(r, kind)] = json.loads(batches)
    every_record = sorted(100 * f + i for f in range(files) for i in range(8))
    for kind in ("reader", "interleave"):
        mine = [seen[(r, kind)] for r in range(2)]
        assert all(len(b) == 2 for batches in mine for b in batches), mine  # global batch 4 / 2 ranks
        assert sorted(sum(mine[0] + mine[1], [])) == every_record, mine
        if files >= 2:
            # Each rank reads only its own files: rank r gets files r and r + 2.
            for r in range(2):
                assert {i // 100 for b in mine[r] for i in b} == {r, r + 2}, (kind, mine)
        else:
            # One file: every rank reads each global batch and keeps its half, in order.
            assert [a + b for a, b in zip(mine[0], mine[1])] == [every_record[i:i + 4] for i in range(0, 8, 4)]


DIES_IN_FIT = r'''
import os, signal
import numpy as np, tensorflow as tf, keras, tfring
tf.config.threading.set_intra_op_parallelism_threads(1)
strategy = tfring.RingStrategy()
x = np.random.default_rng(0).standard_normal((4096, 4)).astype("float32")
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")

class Die(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if batch == 5 and strategy.rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)

try:
    model.fit(x, x[:, :1], batch_size=32, epochs=1, verbose=0, callbacks=[Die()])
except tf.errors.UnavailableError as e:
    print("UNAVAILABLE", "rank 1" in str(e))
'''


def test_a_rank_dying_inside_fit_raises_unavailable_error():
    # Started without tfring run, so nobody stops rank 0 before it sees the error (as under mpirun).
    import subprocess
    import sys

    from tfring.launch.addresses import free_port
    from tfring_dev.testing import QUIET_ENV

    port = free_port()
    env = dict(os.environ, **QUIET_ENV, TFRING_SIZE="2", TFRING_LOCAL_SIZE="2", TFRING_SECRET="s",
               TFRING_STORE_ADDR=f"127.0.0.1:{port}", TFRING_JOB_ID=f"d{port}", TFRING_TIMEOUT="30")
    ranks = [subprocess.Popen([sys.executable, "-c", DIES_IN_FIT], env=dict(env, TFRING_RANK=str(r), TFRING_LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
    out, err = ranks[0].communicate(timeout=300)
    ranks[1].wait(timeout=60)
    assert "UNAVAILABLE True" in out, err[-3000:]


EXACT_METRICS = r'''
import json
import numpy as np
import tensorflow as tf
import keras
import tfring

tf.config.threading.set_intra_op_parallelism_threads(1)
strategy = tfring.RingStrategy(compression="fp16")
x = np.random.default_rng(0).standard_normal((96, 4)).astype("float32")
y = np.full((96, 1), 1000.0, "float32")   # a squared error of ~10^6 a row: sums far over float16's 65504
keras.utils.set_random_seed(0)
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse", metrics=["mae"])
print("LOGS", json.dumps(model.evaluate(x, y, batch_size=32, verbose=0, return_dict=True)))
'''


def test_compression_narrows_gradients_only_metrics_stay_exact(warm):
    """`compression="fp16"` is for gradients: a metric's state (a sum over the epoch's rows) is
    reduced in its own type, so `evaluate` gives one process's figures, not float16's infinity."""
    alone, job = warm.run_alone(EXACT_METRICS, timeout=120), warm.run_job(2, EXACT_METRICS, timeout=300)
    assert alone.returncode == 0 and job.returncode == 0, (alone.stderr + job.stderr)[-3000:]
    one = json.loads(alone.stdout.split("LOGS", 1)[1])
    for rank in range(2):
        logs = json.loads(rank_lines(job.stdout, rank)[0].split("LOGS", 1)[1])
        assert set(logs) == set(one)
        for name in one:
            assert np.isfinite(logs[name]) and abs(logs[name] - one[name]) <= 1e-6 * abs(one[name]), (name, logs, one)
