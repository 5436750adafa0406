"""The ways keras-io teaches to write a loss or feed a model, each on 2 and 3 ranks against one process.

Every pattern below is written as a one-process user writes it (nothing tfring-specific in the
model code), trained under SGD (a gradient N times too large or small cannot hide) and Adam, and
compared with the same script run as one process: the weights, every rank's bits, and the logs
(`fit`'s history, `evaluate`'s result). 100 rows in batches of 48 leave a last batch of 4, which 3 ranks share unevenly.
"""

import json

import numpy as np
import pytest

from tfring_dev.testing import assert_ranks_equal_one_process
from tfring_dev.testing import run_job

pytestmark = pytest.mark.multiprocess

SCRIPT = r'''
import json, os
import numpy as np
import tensorflow as tf
import keras
from keras import layers, ops
import tfring

tf.config.threading.set_intra_op_parallelism_threads(1)
strategy = tfring.RingStrategy()
out = os.environ["OUT"]
rng = np.random.default_rng(0)
ROWS = 100
X = rng.uniform(0, 1, (ROWS, 8)).astype("float32")
Y = (X[:, :1] * 2 - X[:, 1:2]).astype("float32")
LABELS = (X[:, :1] > 0.5).astype("float32")
Z = rng.standard_normal((ROWS, 4)).astype("float32")  # a GAN's latent vectors, part of the data


def optimizer(kind):
    return keras.optimizers.SGD(0.2) if kind == "sgd" else keras.optimizers.Adam(0.01)


def trackers(*names):
    return [keras.metrics.Mean(name=n) for n in names]


class VAE(keras.Model):
    """keras-io's VAE: its own tape, losses reduced with ops.mean, apply_gradients, Mean trackers."""

    def __init__(self):
        super().__init__()
        self.encoder = keras.Sequential([keras.Input((8,)), layers.Dense(6, activation="relu"), layers.Dense(4)])
        self.decoder = keras.Sequential([keras.Input((2,)), layers.Dense(6, activation="relu"), layers.Dense(8)])
        self.total, self.reconstruction, self.kl = trackers("loss", "reconstruction_loss", "kl_loss")

    @property
    def metrics(self):
        return [self.total, self.reconstruction, self.kl]

    def call(self, data):
        return self.decoder(self.encoder(data)[:, :2])

    def train_step(self, data):
        with tf.GradientTape() as tape:
            h = self.encoder(data)
            z_mean, z_log_var = h[:, :2], h[:, 2:]
            z = z_mean + ops.exp(0.5 * z_log_var) * 0.1  # a fixed draw: the job and one process alike
            logits = self.decoder(z)
            reconstruction = ops.mean(ops.sum(keras.losses.binary_crossentropy(
                data[..., None], logits[..., None], from_logits=True), axis=1))
            kl = ops.mean(ops.sum(-0.5 * (1 + z_log_var - ops.square(z_mean) - ops.exp(z_log_var)), axis=1))
            total = reconstruction + kl
        grads = tape.gradient(total, self.trainable_weights)
        self.optimizer.apply_gradients(zip(grads, self.trainable_weights))
        for tracker, value in zip(self.metrics, (total, reconstruction, kl)):
            tracker.update_state(value)
        return {m.name: m.result() for m in self.metrics}


class GAN(keras.Model):
    """keras-io's GAN: two models, two optimizers, a Loss object given to compile, two trackers."""

    def __init__(self):
        super().__init__()
        self.discriminator = keras.Sequential([keras.Input((8,)), layers.Dense(6, activation="relu"), layers.Dense(1)])
        self.generator = keras.Sequential([keras.Input((4,)), layers.Dense(6, activation="relu"), layers.Dense(8)])
        self.d_loss, self.g_loss = trackers("d_loss", "g_loss")

    def compile(self, d_optimizer, g_optimizer, loss_fn):
        super().compile()
        self.d_optimizer, self.g_optimizer, self.loss_fn = d_optimizer, g_optimizer, loss_fn

    @property
    def metrics(self):
        return [self.d_loss, self.g_loss]

    def call(self, images):
        return self.discriminator(images)

    def train_step(self, data):
        real, z = data
        fake = self.generator(z)
        images = ops.concatenate([fake, real], axis=0)
        labels = ops.concatenate([ops.ones((ops.shape(real)[0], 1)), ops.zeros((ops.shape(real)[0], 1))], axis=0)
        with tf.GradientTape() as tape:
            d_loss = self.loss_fn(labels, self.discriminator(images))
        grads = tape.gradient(d_loss, self.discriminator.trainable_weights)
        self.d_optimizer.apply_gradients(zip(grads, self.discriminator.trainable_weights))
        with tf.GradientTape() as tape:
            g_loss = self.loss_fn(ops.zeros((ops.shape(real)[0], 1)), self.discriminator(self.generator(z)))
        grads = tape.gradient(g_loss, self.generator.trainable_weights)
        self.g_optimizer.apply_gradients(zip(grads, self.generator.trainable_weights))
        self.d_loss.update_state(d_loss)
        self.g_loss.update_state(g_loss)
        return {"d_loss": self.d_loss.result(), "g_loss": self.g_loss.result()}


class OwnComputeLoss(keras.Model):
    """`compute_loss` overridden as Keras' docstring shows: ops.mean plus the layers' losses, tracked."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.loss_tracker = keras.metrics.Mean(name="loss")

    def compute_loss(self, x, y, y_pred, sample_weight, training=True):
        loss = ops.mean((y_pred - y) ** 2)
        loss += ops.sum(self.losses)
        self.loss_tracker.update_state(loss)
        return loss

    def reset_metrics(self):
        self.loss_tracker.reset_state()

    @property
    def metrics(self):
        return [self.loss_tracker]


class TrackedSteps(keras.Model):
    """A custom train_step and test_step that take their loss from compute_loss into a tracker."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.tracker = keras.metrics.Mean(name="loss")
        self.mae = keras.metrics.MeanAbsoluteError(name="mae")

    @property
    def metrics(self):
        return [self.tracker, self.mae]

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(y=y, y_pred=y_pred)
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        self.tracker.update_state(loss)
        self.mae.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}

    def test_step(self, data):
        x, y = data
        y_pred = self(x, training=False)
        self.tracker.update_state(self.compute_loss(y=y, y_pred=y_pred))
        self.mae.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}


class MeanEndpoint(layers.Layer):
    """An endpoint layer whose loss is plain ops."""

    def call(self, targets, outputs):
        self.add_loss(ops.mean(ops.square(targets - outputs)))
        return outputs


class LogisticEndpoint(layers.Layer):
    """keras-io's endpoint layer: a Loss object called inside add_loss, and a metric."""

    def __init__(self, name=None):
        super().__init__(name=name)
        self.loss_fn = keras.losses.BinaryCrossentropy(from_logits=True)
        self.accuracy = keras.metrics.BinaryAccuracy()

    def call(self, targets, logits):
        self.add_loss(self.loss_fn(targets, logits))
        self.accuracy.update_state(targets, ops.sigmoid(logits))
        return ops.sigmoid(logits)


def dense(units=1, **kwargs):
    return layers.Dense(units, **kwargs)


def regression_inputs():
    inputs = keras.Input((8,))
    return inputs, dense()(dense(6, activation="tanh", kernel_regularizer="l2")(inputs))


def vae(kind):
    model = VAE()
    model.compile(optimizer=optimizer(kind))
    return model, lambda: model.fit(X, batch_size=48, epochs=2, shuffle=False, verbose=0), None


def gan(kind):
    model = GAN()
    model.compile(optimizer(kind), optimizer(kind), keras.losses.BinaryCrossentropy(from_logits=True))
    data = tf.data.Dataset.from_tensor_slices((X, Z)).batch(48)
    return model, lambda: model.fit(data, epochs=2, verbose=0), None


def compute_loss_override(kind):
    model = OwnComputeLoss(*regression_inputs())
    model.compile(optimizer=optimizer(kind), loss="mse")
    return model, lambda: model.fit(X, Y, batch_size=48, epochs=2, shuffle=False, verbose=0), None


def tracked_steps(kind):
    model = TrackedSteps(*regression_inputs())
    model.compile(optimizer=optimizer(kind), loss="mse")
    fit = lambda: model.fit(X, Y, batch_size=48, epochs=2, shuffle=False, verbose=0)
    return model, fit, lambda: model.evaluate(X, Y, batch_size=48, verbose=0, return_dict=True)


def endpoint_model(endpoint):
    inputs, targets = keras.Input((8,), name="inputs"), keras.Input((1,), name="targets")
    outputs = endpoint(name="endpoint")(targets, dense()(dense(6, activation="tanh")(inputs)))
    return keras.Model({"inputs": inputs, "targets": targets}, outputs)


def add_loss_ops(kind):
    model = endpoint_model(MeanEndpoint)
    model.compile(optimizer=optimizer(kind))
    data = {"inputs": X, "targets": Y}
    fit = lambda: model.fit(data, batch_size=48, epochs=2, shuffle=False, verbose=0)
    return model, fit, lambda: model.evaluate(data, batch_size=48, verbose=0, return_dict=True)


def add_loss_object(kind):
    model = endpoint_model(LogisticEndpoint)
    model.compile(optimizer=optimizer(kind))
    data = {"inputs": X, "targets": LABELS}
    fit = lambda: model.fit(data, batch_size=48, epochs=2, shuffle=False, verbose=0)
    return model, fit, lambda: model.evaluate(data, batch_size=48, verbose=0, return_dict=True)


def add_loss_and_compile_loss(kind):
    inputs = keras.Input((8,))
    hidden = dense(6, activation="tanh")(inputs)
    a, b = dense(name="a")(hidden), dense(name="b")(hidden)
    model = keras.Model(inputs, [MeanEndpoint(name="agree")(b, a), b])
    model.compile(optimizer=optimizer(kind), loss=["mse", keras.losses.MeanSquaredError(reduction="sum")],
                  loss_weights=[1.0, 0.02])
    fit = lambda: model.fit(X, (Y, -Y), batch_size=48, epochs=2, shuffle=False, verbose=0)
    return model, fit, lambda: model.evaluate(X, (Y, -Y), batch_size=48, verbose=0, return_dict=True)


PATTERNS = {"vae": vae, "gan": gan, "compute_loss_override": compute_loss_override,
            "tracked_steps": tracked_steps, "add_loss_ops": add_loss_ops, "add_loss_object": add_loss_object,
            "add_loss_and_compile_loss": add_loss_and_compile_loss}

for case in os.environ["CASES"].split(","):
    pattern, kind = case.rsplit("-", 1)
    keras.utils.set_random_seed(1)
    with strategy.scope():
        model, fit, evaluate = PATTERNS[pattern](kind)
    logs = {"fit": fit().history}
    if evaluate is not None:
        logs["evaluate"] = evaluate()
    name = f"{out}/{case}-{strategy.rank}of{strategy.size}"
    np.save(f"{name}.npy", np.concatenate([v.numpy().ravel() for v in model.weights]))
    with open(f"{name}.json", "w") as f:
        json.dump(logs, f)
'''

PATTERNS = ["vae", "gan", "compute_loss_override", "tracked_steps", "add_loss_ops", "add_loss_object",
            "add_loss_and_compile_loss"]
CASES = [f"{pattern}-{kind}" for pattern in PATTERNS for kind in ("sgd", "adam")]


@pytest.fixture(scope="module")
def results(warm, tmp_path_factory):
    out = tmp_path_factory.mktemp("keras_patterns")
    env = {"OUT": str(out), "PYTHONWARNINGS": "ignore", "CASES": ",".join(CASES)}
    warm.run_alone_then_jobs(SCRIPT, env=env, sizes=(2, 3), timeout=900)
    return out


@pytest.mark.parametrize("size", [2, 3])
@pytest.mark.parametrize("case", CASES)
def test_weights_equal_one_process(results, case, size):
    assert_ranks_equal_one_process(results, case, size)


@pytest.mark.parametrize("size", [2, 3])
@pytest.mark.parametrize("case", CASES)
def test_logs_are_one_process_logs(results, case, size):
    one = json.loads((results / f"{case}-0of1.json").read_text())
    for rank in range(size):
        logs = json.loads((results / f"{case}-{rank}of{size}.json").read_text())
        assert sorted(logs["fit"]) == sorted(one["fit"])
        for key, values in one["fit"].items():
            np.testing.assert_allclose(logs["fit"][key], values, rtol=1e-5, atol=1e-6, err_msg=key)
        for key, value in one.get("evaluate", {}).items():
            np.testing.assert_allclose(logs["evaluate"][key], value, rtol=1e-5, atol=1e-6, err_msg=key)


# A script that sets no global seed, as many do: its pipeline is seeded by its shuffle alone, and
# its weights by their initializers' seeds.
SEEDED_SHUFFLE = r'''
import os
import numpy as np
import tensorflow as tf
import keras
import tfring

tf.config.threading.set_intra_op_parallelism_threads(1)
strategy = tfring.RingStrategy()
rng = np.random.default_rng(0)
x = rng.standard_normal((200, 8)).astype("float32")
y = (x[:, :1] - x[:, 1:2]).astype("float32")
data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(256, seed=3).batch(48)
with strategy.scope():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(6, activation="tanh",
                              kernel_initializer=keras.initializers.GlorotUniform(seed=5)),
                              keras.layers.Dense(1, kernel_initializer=keras.initializers.GlorotUniform(seed=6))])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
model.fit(data, epochs=2, verbose=0)
np.save(f"{os.environ['OUT']}/seeded_shuffle-{strategy.rank}of{strategy.size}.npy",
        np.concatenate([v.numpy().ravel() for v in model.weights]))
'''


@pytest.mark.parametrize("size", [2, 3])
def test_a_pipeline_seeded_by_its_shuffle_gives_the_job_one_process_batches(warm, tmp_path, size):
    warm.run_alone_then_jobs(SEEDED_SHUFFLE, env={"OUT": str(tmp_path)}, sizes=(size,))
    assert_ranks_equal_one_process(tmp_path, "seeded_shuffle", size)


# MirroredStrategy's habit: the loss divided by the number of replicas inside the step.
DIVIDED = r'''
import numpy as np
import tensorflow as tf
import keras
import tfring

tf.config.threading.set_intra_op_parallelism_threads(1)
strategy = tfring.RingStrategy()
x = np.ones((8, 2), "float32")
with strategy.scope():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(0.1)
    model.compile(optimizer="sgd", loss="mse")


@tf.function
def step(xb):
    def one(xb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model(xb)) / strategy.num_replicas_in_sync  # LINE
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    return strategy.run(one, args=(xb,))


for _ in range(2):
    for batch in strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices(x).batch(4)):
        step(batch)
model.fit(x, x[:, :1], batch_size=4, epochs=2, verbose=0)
print("DONE")
'''


def test_a_step_that_reads_the_replica_count_is_warned_about_once_naming_the_line(tmp_path):
    script = tmp_path / "divided.py"
    script.write_text(DIVIDED)
    line = DIVIDED.splitlines().index(next(l for l in DIVIDED.splitlines() if l.endswith("# LINE"))) + 1
    proc = run_job(2, f"exec(compile(open({str(script)!r}).read(), {str(script)!r}, 'exec'))", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    output = proc.stdout + proc.stderr
    warned = [l for l in output.splitlines() if "reads num_replicas_in_sync inside a step" in l]
    assert warned and all(f"{script}:{line}:" in l for l in warned), output[-3000:]
    assert len(warned) <= 2, warned  # once per rank at most, and nothing for fit's own reads


# A custom loop as one process writes it (no division by the number of replicas), under strategy.run.
CUSTOM_LOOP = r'''
import os
import numpy as np
import tensorflow as tf
import keras
from keras import ops
import tfring

tf.config.threading.set_intra_op_parallelism_threads(1)
strategy = tfring.RingStrategy()
rng = np.random.default_rng(0)
x = rng.standard_normal((100, 8)).astype("float32")  # batches of 48: a last one of 4, uneven on 3 ranks
y = (x[:, :1] - x[:, 1:2]).astype("float32")
for kind in ("sgd", "adam"):
    keras.utils.set_random_seed(1)
    with strategy.scope():
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(6, activation="tanh"), keras.layers.Dense(1)])
        optimizer = keras.optimizers.SGD(0.2) if kind == "sgd" else keras.optimizers.Adam(0.01)
    data = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices((x, y)).batch(48))

    @tf.function
    def train_step(xb, yb):
        def step(xb, yb):
            with tf.GradientTape() as tape:
                loss = ops.mean(ops.square(model(xb, training=True) - yb))
            optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))

        strategy.run(step, args=(xb, yb))

    for _ in range(2):
        for xb, yb in data:
            train_step(xb, yb)
    np.save(f"{os.environ['OUT']}/custom_loop-{kind}-{strategy.rank}of{strategy.size}.npy",
            np.concatenate([v.numpy().ravel() for v in model.weights]))
'''


@pytest.mark.parametrize("size", [2, 3])
def test_a_custom_loop_written_as_for_one_process_equals_one_process(warm, tmp_path, size):
    warm.run_alone_then_jobs(CUSTOM_LOOP, env={"OUT": str(tmp_path)}, sizes=(size,))
    for kind in ("sgd", "adam"):
        assert_ranks_equal_one_process(tmp_path, f"custom_loop-{kind}", size)
