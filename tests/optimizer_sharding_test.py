"""RingStrategy(shard_optimizer_state=True): each rank keeps the optimizer state of the variables it
owns, the weights equal the unsharded run's and one process's, and a save holds the whole state."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tfring_dev.testing import QUIET_ENV
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
x = rng.standard_normal((192, 8)).astype("float32")
y = (x[:, 0] + 2 * x[:, 1] > 0).astype("int32") + (x[:, 2] > 1).astype("int32")
OPTIMIZERS = {
    "sgd": lambda: keras.optimizers.SGD(0.1, momentum=0.9, nesterov=True),
    "adam": lambda: keras.optimizers.Adam(0.01),
    "adamw": lambda: keras.optimizers.AdamW(0.01, weight_decay=0.05),
    "rmsprop": lambda: keras.optimizers.RMSprop(0.01, momentum=0.5),
    "adam_clipped": lambda: keras.optimizers.Adam(0.01, global_clipnorm=0.05),  # clips at every step here
    "mixed": lambda: keras.optimizers.Adam(0.01),  # under mixed_float16: a LossScaleOptimizer around it
    # Updates that need a whole variable's norm: a variable is never cut, so they shard as they are.
    "lars": lambda: tfring.optimizers.LARS(0.1, momentum=0.9, weight_decay=1e-4),
    "lamb": lambda: keras.optimizers.Lamb(0.01),
    # The other elementwise Keras optimizers, and a per-variable option.
    "adagrad": lambda: keras.optimizers.Adagrad(0.05),
    "adadelta": lambda: keras.optimizers.Adadelta(1.0),
    "adamax": lambda: keras.optimizers.Adamax(0.01),
    "nadam": lambda: keras.optimizers.Nadam(0.01),
    "lion": lambda: keras.optimizers.Lion(0.001),
    "ftrl": lambda: keras.optimizers.Ftrl(0.05),
    "adamw_excluded": lambda: _excluding(keras.optimizers.AdamW(0.01, weight_decay=0.05), ["bias"]),
}


def _excluding(optimizer, names):
    optimizer.exclude_from_weight_decay(var_names=names)
    return optimizer
if os.environ["OPT"] == "mixed":
    keras.mixed_precision.set_global_policy("mixed_float16")
# SHARD: 0 unsharded, 1 the optimizer state, 2 the gradients too.
strategy = tfring.RingStrategy(shard_optimizer_state=os.environ["SHARD"] != "0",
                               shard_gradients=os.environ["SHARD"] == "2")
with strategy.scope():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(12, activation="relu"), keras.layers.Dense(3)])
    model.compile(optimizer=OPTIMIZERS[os.environ["OPT"]](),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
before = tfring.traffic()  # (a warm worker's counts start with the jobs it ran before)
# 192 rows in batches of 40: the last batch (32 rows) is uneven over 3 ranks.
model.fit(x, y, batch_size=40, epochs=3, shuffle=False, verbose=0)
tag = f"{strategy.rank}of{strategy.size}s{os.environ['SHARD']}"
out = os.environ["OUT"]
np.save(f"{out}/w{tag}.npy", np.concatenate([v.numpy().ravel() for v in model.weights]))
state_bytes = sum(v.numpy().nbytes for v in model.optimizer.variables)
model.save(f"{out}/model{strategy.size}s{os.environ['SHARD']}.keras")
with open(f"{out}/bytes{tag}.json", "w") as f:
    json.dump(state_bytes, f)
with open(f"{out}/traffic{tag}.json", "w") as f:
    json.dump({kind: {k: c[k] - before[kind][k] for k in c} for kind, c in tfring.traffic().items()}, f)
'''

LOAD = r'''
import sys
import numpy as np
import keras
import tfring.optimizers  # (tfring's LARS, for files that hold one)
model = keras.models.load_model(sys.argv[1])
np.save(sys.argv[2], np.concatenate([v.numpy().ravel() for v in model.optimizer.variables]))
'''


def _alone(tmp_path, script, args=(), env=None):
    full = {k: v for k, v in dict(os.environ, **QUIET_ENV, **(env or {})).items() if not k.startswith("TFRING_")}
    proc = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, env=full, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.parametrize("opt,size", [("sgd", 2), ("adam", 2), ("adamw", 3), ("rmsprop", 3), ("adam_clipped", 3),
                                      ("mixed", 2), ("lars", 2), ("lamb", 3), ("adagrad", 2), ("adadelta", 2),
                                      ("adamax", 2), ("nadam", 2), ("lion", 2), ("ftrl", 2), ("adamw_excluded", 3)])
def test_sharded_state_equals_unsharded_and_one_process(warm, tmp_path, opt, size):
    script = tmp_path / "fit.py"
    script.write_text(FIT)
    env = {"OPT": opt, "OUT": str(tmp_path)}
    _alone(tmp_path, script, env=dict(env, SHARD="0"))
    for shard in ("0", "1"):
        proc = warm.run_job(size, FIT, env=dict(env, SHARD=shard), timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
    one = np.load(tmp_path / "w0of1s0.npy")
    plain = np.load(tmp_path / f"w0of{size}s0.npy")
    sharded = [np.load(tmp_path / f"w{r}of{size}s1.npy") for r in range(size)]
    for r in range(size):
        assert np.array_equal(sharded[r], plain), f"rank {r}: sharded weights differ from the unsharded job's"
    # (float16 arithmetic rounds differently for 2 half batches than for one whole batch)
    assert np.max(np.abs(plain - one)) <= (2e-2 if opt == "mixed" else 1e-5)
    # Each rank holds about 1/size of the slots (whole variables, balanced by bytes).
    whole = json.loads((tmp_path / f"bytes0of{size}s0.json").read_text())
    held = [json.loads((tmp_path / f"bytes{r}of{size}s1.json").read_text()) for r in range(size)]
    assert sum(held) < whole + (size - 1) * 64, (held, whole)  # (the step counter and rate on every rank)
    assert max(held) < 0.75 * whole, (held, whole)
    # The sharded job's file holds the whole state: it loads into one process equal to the unsharded job's.
    loader = tmp_path / "load.py"
    loader.write_text(LOAD)
    for shard in ("0", "1"):
        _alone(tmp_path, loader, (str(tmp_path / f"model{size}s{shard}.keras"), str(tmp_path / f"state{shard}.npy")))
    np.testing.assert_array_equal(np.load(tmp_path / "state1.npy"), np.load(tmp_path / "state0.npy"))


@pytest.mark.parametrize("opt,size", [("sgd", 2), ("adam", 2), ("adam_clipped", 3), ("rmsprop", 3)])
def test_sharded_gradients_equal_one_process_and_travel_to_their_owners(warm, tmp_path, opt, size):
    script = tmp_path / "fit.py"
    script.write_text(FIT)
    env = {"OPT": opt, "OUT": str(tmp_path)}
    _alone(tmp_path, script, env=dict(env, SHARD="0"))
    proc = warm.run_job(size, FIT, env=dict(env, SHARD="2"), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    one = np.load(tmp_path / "w0of1s0.npy")
    staged = [np.load(tmp_path / f"w{r}of{size}s2.npy") for r in range(size)]
    for r in range(1, size):
        assert np.array_equal(staged[r], staged[0]), f"rank {r} ended with other weights than rank 0"
    assert np.max(np.abs(staged[0] - one)) <= 1e-5
    whole = json.loads((tmp_path / "bytes0of1s0.json").read_text())
    held = [json.loads((tmp_path / f"bytes{r}of{size}s2.json").read_text()) for r in range(size)]
    assert max(held) < 0.75 * whole, (held, whole)
    # The gradients were reduce-scattered, not all-reduced: what was all-reduced is small (the
    # metrics, the clipping norm), a fraction of one step's gradients.
    traffic = json.loads((tmp_path / f"traffic0of{size}s2.json").read_text())
    gradient_bytes = 4 * one.size
    assert traffic["reducescatter"]["calls"] >= 15, traffic  # 3 epochs of 5 steps
    assert traffic["reducescatter"]["bytes"] >= 15 * gradient_bytes, traffic
    assert traffic["allreduce"]["bytes"] < gradient_bytes, traffic



def test_the_timeline_shows_the_reduce_scatter_and_allgather_phases(tmp_path):
    # (plain processes: a warm worker's engine started before this job's timeline setting)
    env = {"OPT": "adam", "OUT": str(tmp_path), "SHARD": "2", "TFRING_TIMELINE": str(tmp_path / "trace.json")}
    proc = run_job(2, FIT, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for rank in (0, 1):
        spans = [e["name"] for e in json.loads((tmp_path / f"trace.rank{rank}.json").read_text())
                 if e.get("ph") == "X"]
        # 3 epochs of 5 steps, each reducing its gradients to their owners and gathering the new values
        assert sum(name.startswith("reducescatter ") for name in spans) >= 15, sorted(set(spans))[:20]
        assert sum(name.startswith("allgather ") for name in spans) >= 15, sorted(set(spans))[:20]

CUSTOM_STEP = r'''
import os
import numpy as np
import tensorflow as tf
import keras
import tfring

tf.config.threading.set_intra_op_parallelism_threads(1)
keras.utils.set_random_seed(1)
rng = np.random.default_rng(0)
x = rng.standard_normal((96, 6)).astype("float32")
y = rng.standard_normal((96, 1)).astype("float32")


class Custom(keras.Model):
    """keras-io's custom train_step, with an add_loss penalty: the loss and the gradients by hand."""

    def __init__(self):
        super().__init__()
        self.hidden = keras.layers.Dense(8, activation="relu")
        self.out = keras.layers.Dense(1)

    def call(self, inputs):
        h = self.hidden(inputs)
        self.add_loss(1e-2 * tf.reduce_mean(tf.square(h)))
        return self.out(h)

    def train_step(self, data):
        inputs, target = data
        with tf.GradientTape() as tape:
            prediction = self(inputs, training=True)
            loss = self.compute_loss(x=inputs, y=target, y_pred=prediction)
        self.optimizer.apply(tape.gradient(loss, self.trainable_variables), self.trainable_variables)
        return {"loss": loss}


shard = os.environ["SHARD"]
strategy = tfring.RingStrategy(shard_optimizer_state=shard != "0", shard_gradients=shard == "2")
with strategy.scope():
    model = Custom()
    model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9), loss="mse")
model.fit(x, y, batch_size=24, epochs=2, shuffle=False, verbose=0)
np.save(os.path.join(os.environ["OUT"], f"c{strategy.rank}of{strategy.size}s{shard}.npy"),
        np.concatenate([v.numpy().ravel() for v in model.weights]))
'''


def test_a_custom_train_step_with_add_loss_shards_to_one_processs_weights(warm, tmp_path):
    script = tmp_path / "custom.py"
    script.write_text(CUSTOM_STEP)
    env = {"OUT": str(tmp_path)}
    _alone(tmp_path, script, env=dict(env, SHARD="0"))
    for shard in ("0", "1", "2"):
        proc = warm.run_job(2, CUSTOM_STEP, env=dict(env, SHARD=shard), timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
    one = np.load(tmp_path / "c0of1s0.npy")
    plain = np.load(tmp_path / "c0of2s0.npy")
    assert np.max(np.abs(plain - one)) <= 1e-5
    for shard in ("1", "2"):  # SGD with momentum: a gradient N times off would show
        for r in (0, 1):
            assert np.array_equal(np.load(tmp_path / f"c{r}of2s{shard}.npy"), plain), f"{shard}: rank {r} differs"


# keras-io's custom training loop under strategy.run (no fit): the optimizer's apply_gradients shards too.
CUSTOM_LOOP = r'''
import os
import numpy as np
import tensorflow as tf
import keras
import tfring

tf.config.threading.set_intra_op_parallelism_threads(1)
rng = np.random.default_rng(0)
x = rng.standard_normal((100, 8)).astype("float32")  # batches of 40: a last one of 20
y = (x[:, :1] - x[:, 1:2]).astype("float32")
shard = os.environ["SHARD"]
strategy = tfring.RingStrategy(shard_optimizer_state=shard != "0", shard_gradients=shard == "2")
for kind in ("sgd", "adam"):
    keras.utils.set_random_seed(1)
    with strategy.scope():
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(6, activation="tanh"),
                                  keras.layers.Dense(5, activation="tanh"), keras.layers.Dense(1)])
        optimizer = keras.optimizers.SGD(0.1, momentum=0.9) if kind == "sgd" else keras.optimizers.Adam(0.01)
    data = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices((x, y)).batch(40))

    @tf.function
    def train_step(xb, yb):
        def step(xb, yb):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(xb, training=True) - yb))
            optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))

        strategy.run(step, args=(xb, yb))

    for _ in range(3):
        for xb, yb in data:
            train_step(xb, yb)
    np.save(f"{os.environ['OUT']}/loop-{kind}-{strategy.rank}of{strategy.size}s{shard}.npy",
            np.concatenate([v.numpy().ravel() for v in model.weights]))
    with open(f"{os.environ['OUT']}/loop-{kind}-{strategy.rank}of{strategy.size}s{shard}.bytes", "w") as f:
        f.write(str(sum(v.numpy().nbytes for v in optimizer.variables)))
'''


def test_a_custom_loop_under_strategy_run_shards_to_one_processs_weights(warm, tmp_path):
    script = tmp_path / "loop.py"
    script.write_text(CUSTOM_LOOP)
    env = {"OUT": str(tmp_path)}
    _alone(tmp_path, script, env=dict(env, SHARD="0"))
    for shard in ("0", "1", "2"):
        proc = warm.run_job(2, CUSTOM_LOOP, env=dict(env, SHARD=shard), timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
    for kind in ("sgd", "adam"):
        one = np.load(tmp_path / f"loop-{kind}-0of1s0.npy")
        plain = np.load(tmp_path / f"loop-{kind}-0of2s0.npy")
        assert np.max(np.abs(plain - one)) <= 1e-5, kind
        whole = int((tmp_path / f"loop-{kind}-0of2s0.bytes").read_text())
        for shard in ("1", "2"):  # on 2 ranks every stage adds the same two values: bit for bit
            for r in (0, 1):
                weights = np.load(tmp_path / f"loop-{kind}-{r}of2s{shard}.npy")
                assert np.array_equal(weights, plain), f"{kind}, stage {shard}: rank {r} differs from unsharded"
                held = int((tmp_path / f"loop-{kind}-{r}of2s{shard}.bytes").read_text())
                assert held < 0.75 * whole, (kind, shard, r, held, whole)  # the state was sharded

STAGE2_REFUSED = r'''
import numpy as np
import keras
import tfring
try:
    tfring.RingStrategy(shard_gradients=True)
except ValueError as e:
    print("NEEDS_STATE", "shard_optimizer_state=True" in str(e))
for what in ("compression", "mixed"):
    if what == "mixed":
        keras.mixed_precision.set_global_policy("mixed_float16")
    strategy = tfring.RingStrategy(shard_optimizer_state=True, shard_gradients=True,
                                   compression="fp16" if what == "compression" else None)
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    try:
        model.fit(np.ones((8, 4), "float32"), np.ones((8, 2), "float32"), batch_size=4, verbose=0)
        print("FITTED", what)
    except ValueError as e:
        print("REFUSED", what, "shard_gradients=False" in str(e))
'''


def test_sharded_gradients_refuse_what_needs_whole_gradients(tmp_path):
    proc = run_job(2, STAGE2_REFUSED, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for line in ("NEEDS_STATE True", "REFUSED compression True", "REFUSED mixed True"):
        assert f"[0] {line}" in proc.stdout, proc.stdout[-3000:]
    assert "FITTED" not in proc.stdout


REFUSED = r'''
import os
import numpy as np
import keras
import tfring
strategy = tfring.RingStrategy(shard_optimizer_state=True)
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile(optimizer=keras.optimizers.Adam(0.01, use_ema=True), loss="mse")
try:
    model.fit(np.ones((8, 4), "float32"), np.ones((8, 2), "float32"), batch_size=4, verbose=0)
except ValueError as e:
    print("REFUSED", "use_ema" in str(e))
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(2)])
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
model.fit(np.ones((8, 4), "float32"), np.ones((8, 2), "float32"), batch_size=4, verbose=0)
# tf.train.Checkpoint would write each rank's part of the state: refused (model.save gathers it).
try:
    import tensorflow as tf
    checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
    checkpoint.write(os.path.join(os.environ["OUT"], f"c{strategy.rank}"))
    print("CHECKPOINT_WRITTEN", strategy.rank)
except ValueError as e:
    print("CHECKPOINT_REFUSED", strategy.rank, "model.save" in str(e))
'''


def test_an_unsupported_setting_is_refused_naming_it(warm, tmp_path):
    proc = warm.run_job(2, REFUSED, env={"OUT": str(tmp_path)}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("] REFUSED True") == 2, proc.stdout[-2000:]
    assert "CHECKPOINT_REFUSED 0 True" in proc.stdout, proc.stdout[-2000:]
    assert "CHECKPOINT_WRITTEN" not in proc.stdout


RESUME = r'''
import os
import numpy as np
import tensorflow as tf
import keras
import tfring

tf.config.threading.set_intra_op_parallelism_threads(1)
keras.utils.set_random_seed(1)
rng = np.random.default_rng(0)
x = rng.standard_normal((192, 8)).astype("float32")
y = (x[:, 0] + 2 * x[:, 1] > 0).astype("int32")
# SHARD: 0 unsharded, 1 the optimizer state, 2 the gradients too.
strategy = tfring.RingStrategy(shard_optimizer_state=os.environ["SHARD"] != "0",
                               shard_gradients=os.environ["SHARD"] == "2")
out, phase = os.environ["OUT"], os.environ["PHASE"]
with strategy.scope():
    if phase == "second":
        model = keras.models.load_model(f"{out}/half.keras")
    else:
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(2)])
        model.compile(optimizer=keras.optimizers.Adam(0.01),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
epochs = {"first": 2, "second": 4, "whole": 4}[phase]
model.fit(x, y, batch_size=48, epochs=epochs, initial_epoch=2 if phase == "second" else 0, shuffle=False, verbose=0)
if phase == "first":
    model.save(f"{out}/half.keras")
np.save(f"{out}/{phase}{strategy.rank}.npy", np.concatenate([v.numpy().ravel() for v in model.weights]))
'''


def test_a_sharded_save_resumes_in_a_sharded_job_of_another_size(warm, tmp_path):
    script = tmp_path / "resume.py"
    script.write_text(RESUME)
    env = {"OUT": str(tmp_path)}
    _alone(tmp_path, script, env=dict(env, SHARD="0", PHASE="whole"))
    for ranks, phase, shard in ((2, "first", "2"), (3, "second", "1")):  # stage 2 saves, stage 1 resumes
        proc = warm.run_job(ranks, RESUME, env=dict(env, SHARD=shard, PHASE=phase), timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
    whole = np.load(tmp_path / "whole0.npy")
    resumed = [np.load(tmp_path / f"second{r}.npy") for r in range(3)]
    assert all(np.array_equal(r, resumed[0]) for r in resumed), "ranks differ"
    # Adam's moments came back whole and went to their new owners: the run continues as one process's.
    assert np.max(np.abs(resumed[0] - whole)) <= 1e-5, np.max(np.abs(resumed[0] - whole))


HOROVOD = r'''
import os, json
import numpy as np
import tensorflow as tf
import keras
import tfring.horovod.keras as hvd

hvd.init()
tf.config.threading.set_intra_op_parallelism_threads(1)
keras.utils.set_random_seed(1 + hvd.rank())  # different initial weights: the callback broadcasts rank 0's
rng = np.random.default_rng(0)
x = rng.standard_normal((192, 8)).astype("float32")
y = (x[:, 0] + 2 * x[:, 1] > 0).astype("int32")
shard, passes = os.environ["SHARD"] != "0", int(os.environ["PASSES"])  # SHARD 2: the gradients too
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(12, activation="relu"), keras.layers.Dense(2)])
opt = hvd.DistributedOptimizer(keras.optimizers.Adam(0.01), shard_optimizer_state=shard,
                               shard_gradients=os.environ["SHARD"] == "2", backward_passes_per_step=passes)
model.compile(optimizer=opt, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
r, n = hvd.rank(), hvd.size()
model.fit(x[r::n], y[r::n], batch_size=48 // n, epochs=3, shuffle=False, verbose=0,
          callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
tag = f"{r}s{os.environ['SHARD']}p{passes}"
np.save(os.path.join(os.environ["OUT"], f"h{tag}.npy"), np.concatenate([v.numpy().ravel() for v in model.weights]))
with open(os.path.join(os.environ["OUT"], f"hb{tag}.json"), "w") as f:
    json.dump(sum(v.numpy().nbytes for v in model.optimizer.variables), f)
'''


@pytest.mark.parametrize("passes", [1, 2])
def test_horovods_distributed_optimizer_shards_to_the_same_weights(tmp_path, passes):
    env = {"OUT": str(tmp_path), "PASSES": str(passes)}
    for shard in ("0", "1", "2"):
        # Fresh processes: a warm worker that ran a RingStrategy would take this script's model for one
        # built outside that strategy's scope.
        proc = run_job(2, HOROVOD, env=dict(env, SHARD=shard), timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
    plain = np.load(tmp_path / f"h0s0p{passes}.npy")
    whole = json.loads((tmp_path / f"hb0s0p{passes}.json").read_text())
    for shard in ("1", "2"):  # on 2 ranks a reduce-scatter adds the same two values as the allreduce
        for r in (0, 1):
            assert np.array_equal(np.load(tmp_path / f"h{r}s{shard}p{passes}.npy"), plain), f"{shard}: rank {r}"
        held = [json.loads((tmp_path / f"hb{r}s{shard}p{passes}.json").read_text()) for r in (0, 1)]
        assert max(held) < 0.75 * whole, (shard, held, whole)


ELASTIC_STATE = r'''
import os
import numpy as np
import tensorflow as tf
import keras
import tfring.horovod.keras as hvd

hvd.init()
tf.config.threading.set_intra_op_parallelism_threads(1)
keras.utils.set_random_seed(1)
rng = np.random.default_rng(0)
x = rng.standard_normal((96, 8)).astype("float32")
y = (x[:, 0] > 0).astype("int32")
shard = os.environ["SHARD"] == "1"
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(6, activation="relu"), keras.layers.Dense(2)])
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(0.01), shard_optimizer_state=shard),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
r, n = hvd.rank(), hvd.size()
model.fit(x[r::n], y[r::n], batch_size=24 // n, epochs=1, shuffle=False, verbose=0)  # the slots exist now
state = hvd.elastic.KerasState(model, epoch=1)
state.sync()  # every rank takes rank 0's weights; a rank keeps the slots it owns
state.commit()
model.fit(x[r::n], y[r::n], batch_size=24 // n, epochs=1, shuffle=False, verbose=0)
state.restore()  # back to the commit, slots included
model.fit(x[r::n], y[r::n], batch_size=24 // n, epochs=1, shuffle=False, verbose=0)
np.save(os.path.join(os.environ["OUT"], f"e{r}s{int(shard)}.npy"), np.concatenate([v.numpy().ravel() for v in model.weights]))
'''


def test_horovods_elastic_state_syncs_and_restores_a_sharded_optimizer(tmp_path):
    for shard in ("0", "1"):
        proc = run_job(2, ELASTIC_STATE, env={"OUT": str(tmp_path), "SHARD": shard}, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
    plain = np.load(tmp_path / "e0s0.npy")
    for r in (0, 1):
        assert np.array_equal(np.load(tmp_path / f"e{r}s1.npy"), plain), f"rank {r} differs"


SPARSE = r'''
import os
import numpy as np
import tensorflow as tf
import keras
import tfring

tf.config.threading.set_intra_op_parallelism_threads(1)
keras.utils.set_random_seed(1)
rng = np.random.default_rng(0)
x = rng.integers(0, 50, (96, 5))
y = (x.sum(1) % 2).astype("int32")
# SHARD: 0 unsharded, 1 the optimizer state, 2 the gradients too.
strategy = tfring.RingStrategy(shard_optimizer_state=os.environ["SHARD"] != "0",
                               shard_gradients=os.environ["SHARD"] == "2")
with strategy.scope():
    model = keras.Sequential([keras.Input((5,), dtype="int32"), keras.layers.Embedding(50, 8), keras.layers.Flatten(),
                              keras.layers.Dense(2)])
    model.compile(optimizer=keras.optimizers.Adam(0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0)
np.save(os.path.join(os.environ["OUT"], f"e{strategy.rank}s{os.environ['SHARD']}.npy"),
        np.concatenate([v.numpy().ravel() for v in model.weights]))
'''


def test_sparse_gradients_reach_their_owner(warm, tmp_path):
    # An Embedding's gradient is a tf.IndexedSlices: reduced as rows (to every rank, also with sharded
    # gradients), applied by its owner, gathered whole.
    for shard in ("0", "1", "2"):
        proc = warm.run_job(2, SPARSE, env={"OUT": str(tmp_path), "SHARD": shard}, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
    plain = np.load(tmp_path / "e0s0.npy")
    for shard in ("1", "2"):
        for r in (0, 1):
            assert np.array_equal(np.load(tmp_path / f"e{r}s{shard}.npy"), plain), f"{shard}: rank {r} differs"
