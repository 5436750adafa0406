"""Keras calls beyond fit under RingStrategy: *_on_batch, model(x), and every keras.callbacks class.

Each call either equals one process or is refused with a clear error; callbacks that only report
(progress bar, TensorBoard, CSVLogger) act once per job, and callbacks that decide (EarlyStopping,
ReduceLROnPlateau, TerminateOnNaN) decide the same on every rank.
"""

import csv
import http.server
import importlib.metadata
import os
import subprocess
import sys
import threading

import numpy as np

import pytest

from tfring_dev.testing import QUIET_ENV
from tfring_dev.testing import rank_lines
from tfring_dev.testing import run_job

pytestmark = pytest.mark.multiprocess

PRELUDE = r'''
import os
import numpy as np
import tensorflow as tf
import keras
import tfring

tf.config.threading.set_intra_op_parallelism_threads(1)
rng = np.random.default_rng(0)
x = rng.standard_normal((96, 8)).astype("float32")
y = (x[:, 0] > 0).astype("int32") + (x[:, 1] > 0.5).astype("int32")
strategy = tfring.RingStrategy()
out = os.environ["OUT"]


def model(lr=0.1, **optimizer):
    keras.utils.set_random_seed(1)
    with strategy.scope():
        m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(3)])
        m.compile(optimizer=keras.optimizers.SGD(lr, **optimizer), metrics=["accuracy"],
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m
'''

ON_BATCH = PRELUDE + r'''
m = model()
train = m.train_on_batch(x[:16], y[:16], return_dict=True)
test = m.test_on_batch(x[16:48], y[16:48], return_dict=True)
pred = m.predict_on_batch(x[:8])
call = m(x[:8]).numpy()
step = m.predict_step((x[:8],)).numpy()
if strategy.rank == 0:
    alone = m.predict_on_batch(x[8:13])   # on one rank only: needs nothing from the others
    print("ALONE", alone.shape)
w = np.concatenate([v.numpy().ravel() for v in m.weights])
np.savez(f"{out}/on_batch-{strategy.rank}of{strategy.size}.npz", w=w, pred=pred, call=call, step=step,
         train=[train["loss"], train["accuracy"]], test=[test["loss"], test["accuracy"]])
'''


def test_on_batch_calls_and_model_calls_equal_one_process(warm, tmp_path):
    env = {"OUT": str(tmp_path)}
    proc = warm.run_alone(ON_BATCH, env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = warm.run_job(2, ON_BATCH, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ALONE (5, 3)" in rank_lines(proc.stdout, 0)
    one = np.load(tmp_path / "on_batch-0of1.npz")
    for rank in (0, 1):
        mine = np.load(tmp_path / f"on_batch-{rank}of2.npz")
        assert mine["pred"].shape == (8, 3)  # not 16 rows: the batch of this rank alone
        for key in ("w", "pred", "call", "step", "train", "test"):
            np.testing.assert_allclose(mine[key], one[key], rtol=1e-5, atol=1e-6, err_msg=key)


CALLBACKS = PRELUDE + r'''
import sys
sys.stdout = open(f"{out}/stdout{strategy.rank}.txt", "w", buffering=1)  # what each rank prints


class Epochs(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        self.epochs, self.batches = 0, 0

    def on_epoch_end(self, epoch, logs=None):
        self.epochs += 1

    def on_train_batch_end(self, batch, logs=None):
        self.batches += 1


def lr(m):
    return float(m.optimizer.learning_rate.numpy())


m = model()
report = [keras.callbacks.TensorBoard(log_dir=f"{out}/tb"), keras.callbacks.CSVLogger(f"{out}/log.csv", append=True),
          keras.callbacks.RemoteMonitor(root=os.environ["MONITOR"]),
          keras.callbacks.LambdaCallback(on_epoch_end=lambda e, logs: print("LAMBDA", e)),
          keras.callbacks.LearningRateScheduler(lambda e, rate: rate * 0.5)]
for _ in range(2):
    m.fit(x, y, batch_size=32, epochs=2, verbose=1, validation_data=(x[:32], y[:32]), callbacks=report)
m.evaluate(x, y, batch_size=32, verbose=1)
m.predict(x, batch_size=32, verbose=1)
print("SCHEDULED", round(lr(m), 6))

m = model()
count = Epochs()
m.fit(x, y, batch_size=32, epochs=6, verbose=0, callbacks=[
    count, keras.callbacks.EarlyStopping(monitor="loss", patience=1, min_delta=10.0),
    keras.callbacks.ReduceLROnPlateau(monitor="loss", patience=0, min_delta=10.0, factor=0.5)])
print("STOPPED", count.epochs, round(lr(m), 6))

m = model()
count = Epochs()
bad = x.copy()
# Row 50 is in rank 1's half of the second global batch (rows 32..63). An infinity in one feature,
# not a NaN row: oneDNN's fused MatMul+ReLU turns NaN into 0 on some CPUs (AVX-512), which hides it.
bad[50, 0] = np.inf
m.fit(bad, y, batch_size=32, epochs=3, verbose=0, shuffle=False,
      callbacks=[count, keras.callbacks.TerminateOnNaN()])
print("NAN", count.epochs, count.batches, m.stop_training)

m = model(use_ema=True, ema_momentum=0.5)
m.fit(x, y, batch_size=32, epochs=2, verbose=0, validation_data=(x[:32], y[:32]),
      callbacks=[keras.callbacks.SwapEMAWeights(swap_on_epoch=True)])
w = tf.concat([tf.reshape(v, [-1]) for v in m.weights], 0)
g = tfring.ops.allgather(tf.reshape(w, [1, -1])).numpy()
print("EMA", bool(np.all(g == g[0])), bool(np.all(np.isfinite(g))))
'''


class _Monitor(http.server.BaseHTTPRequestHandler):
    posts = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        self.posts.append(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_every_callback_acts_once_or_alike_on_every_rank(warm, tmp_path):
    server = http.server.HTTPServer(("127.0.0.1", 0), _Monitor)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        env = {"OUT": str(tmp_path), "PYTHONWARNINGS": "ignore", "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1",
               "MONITOR": f"http://127.0.0.1:{server.server_address[1]}"}
        proc = warm.run_job(2, CALLBACKS, env=env)
    finally:
        server.shutdown()
        server.server_close()
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(_Monitor.posts) == 4, _Monitor.posts  # RemoteMonitor: one post per epoch, from rank 0
    r0, r1 = [(tmp_path / f"stdout{r}.txt").read_text() for r in (0, 1)]
    # Progress bars and TensorBoard/CSV logs: rank 0 only. LambdaCallback: every rank (documented).
    assert "/step" in r0 and "/step" not in r1, r1
    events = [os.path.join(d, f) for d, _, files in os.walk(tmp_path / "tb") for f in files if "tfevents" in f]
    # Two fits write two event files per folder, as one process does, all from one process.
    assert sorted(os.path.basename(os.path.dirname(e)) for e in events) == ["train"] * 2 + ["validation"] * 2, events
    assert len({os.path.basename(e).split(".")[-3] for e in events}) == 1, events
    with open(tmp_path / "log.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["epoch"] for r in rows] == ["0", "1", "0", "1"], rows
    for lines in (r0, r1):  # (rank 0's lines may follow a progress bar's last redraw)
        assert lines.count("LAMBDA") == 4
        assert "SCHEDULED 0.00625" in lines  # 0.1 halved in each of the 4 epochs (two fits)
        # After the first epoch (better than nothing), min_delta=10 never counts as an improvement:
        # patience 1 stops after epoch 2, where patience 0 halved the rate, on both ranks alike.
        assert "STOPPED 2 0.05" in lines
        # A NaN in rank 1's rows makes the global loss NaN: both stop at the second batch.
        assert "NAN 1 2 True" in lines  # (Keras ends the stopped epoch: on_epoch_end runs once)
        assert "EMA True True" in lines


SAVE = r'''
import sys
import numpy as np
import keras
import tfring

m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
lr = tfring.schedules.WarmUp(tfring.schedules.MultiStepDecay(0.1, [10]), warmup_steps=5)
m.compile(optimizer=tfring.optimizers.LARS(lr), loss="mse")
m.fit(np.ones((8, 4)), np.ones((8, 2)), verbose=0)
m.save(sys.argv[1])
'''

LOAD = r'''
import sys
{imports}
m = keras.models.load_model(sys.argv[1])
print(type(m.optimizer).__name__, type(m.optimizer._learning_rate).__name__)
'''


def test_import_tfring_makes_saved_models_loadable_in_a_fresh_process(tmp_path):
    path = str(tmp_path / "m.keras")
    env = {k: v for k, v in dict(os.environ, **QUIET_ENV).items() if not k.startswith("TFRING_")}
    proc = subprocess.run([sys.executable, "-c", SAVE, path], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for imports in ("import tfring\nimport keras", "import keras\nimport tfring",
                    "import tfring\nimport tensorflow\nimport keras"):
        script = LOAD.format(imports=imports)
        proc = subprocess.run([sys.executable, "-c", script, path], env=env, capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, (imports, proc.stderr[-3000:])
        assert proc.stdout.split() == ["LARS", "WarmUp"]


def test_import_tfring_alone_does_not_import_tensorflow():
    proc = subprocess.run([sys.executable, "-c", "import sys, tfring; print('tensorflow' in sys.modules)"],
                          capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "False", proc.stderr


RANK0_SAVE = PRELUDE + r'''
m = model()
case = os.environ["CASE"]
try:
    if case == "checkpoint":
        # Horovod's habit: the checkpoint callback on rank 0 only.
        cbs = [keras.callbacks.ModelCheckpoint(f"{out}/ck.keras")] if strategy.rank == 0 else []
        m.fit(x, y, batch_size=32, epochs=3, verbose=0, callbacks=cbs)
    else:
        m.fit(x, y, batch_size=32, epochs=1, verbose=0)
        if strategy.rank == 0:
            m.save(f"{out}/m.keras")
        else:
            m.evaluate(x, y, batch_size=32, verbose=0)
    print("NO ERROR")
except Exception as e:
    print("ERROR", type(e).__name__, str(e).replace("\n", " ")[:3000])
'''


def test_saving_on_rank_0_only_says_every_rank_must_save(tmp_path):
    for case, failing in (("checkpoint", (0, 1)), ("save", (0,))):
        proc = run_job(2, RANK0_SAVE, env={"OUT": str(tmp_path), "CASE": case, "TFRING_TIMEOUT": "20"})
        for rank in failing:
            errors = [l for l in rank_lines(proc.stdout, rank) if l.startswith("ERROR")]
            assert errors and "every rank must run the save" in errors[0], (case, proc.stdout, proc.stderr[-2000:])


SHUFFLE = r'''
import numpy as np, tensorflow as tf, keras, tfring

tf.config.threading.set_intra_op_parallelism_threads(1)
n = 101
x = np.arange(n, dtype="float32")[:, None]
y = np.arange(n, dtype="float32")


class Seen(keras.metrics.Metric):
    """Sums y**power over the rows trained on: every row once gives sum(y**power)."""

    def __init__(self, power):
        super().__init__(name=f"seen{power}")
        self.power = power
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")

    def update_state(self, y_true, y_pred, sample_weight=None):
        self.total.assign_add(tf.reduce_sum(tf.cast(y_true, "float32") ** self.power))

    def result(self):
        return self.total


strategy = tfring.RingStrategy()
with strategy.scope():
    m = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    m.compile(optimizer="sgd", loss="mse", metrics=[Seen(1), Seen(2)])
h = m.fit(x, y, batch_size=16, epochs=3, verbose=0)  # shuffle=True (Keras' default), no seed set anywhere
print("SEEN", h.history["seen1"], h.history["seen2"])
'''


# Keras before 3.12 cannot turn a Keras variable that a tf.distribute strategy holds into a float (a
# Keras bug, MirroredStrategy too): a metric whose result() is its own variable, as SHUFFLE's are,
# then leaves unprintable variables in fit's history. `make test-keras-floor` runs this file on 3.10.
@pytest.mark.skipif(tuple(int(p) for p in importlib.metadata.version("keras").split(".")[:2]) < (3, 12),
                    reason="Keras < 3.12 cannot turn a metric whose result() is its own variable into a float "
                           "under a tf.distribute strategy, and this test's metrics are")
def test_numpy_input_shuffled_without_a_seed_gives_every_row_once_per_epoch(warm):
    # Every rank shuffles NumPy input and keeps its rows of each global batch: without one seed on
    # every rank the ranks' rows would overlap and miss (the sums below came out 4857, 5269, 5192).
    proc = warm.run_job(2, SHUFFLE, env={"PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = [l for l in rank_lines(proc.stdout, 0) if l.startswith("SEEN")]
    assert seen == [f"SEEN {[5050.0] * 3} {[338350.0] * 3}"], seen
