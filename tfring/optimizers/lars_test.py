"""LARS: the fused op and the composed TF update against a NumPy transcription of the formulas."""

import os

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from tfring.optimizers import LARS  # noqa: E402
from tfring.ops import lars as lars_ops  # noqa: E402


def numpy_lars(w, v, g, lr, momentum=0.9, weight_decay=1e-4, eta=0.001, eps=0.0, nesterov=False, adapt=True,
               decay=True):
    """One step, float64: returns (w, v, ratio)."""
    w, v, g = (np.asarray(a, np.float64) for a in (w, v, g))
    beta = weight_decay if decay else 0.0
    wn, gn = np.linalg.norm(w), np.linalg.norm(g)
    ratio = eta * wn / (gn + beta * wn + eps) if adapt and wn > 0 and gn > 0 else 1.0
    step = lr * ratio * (g + beta * w)
    v = momentum * v + step
    w = w - (momentum * v + step if nesterov else v)
    return w, v, ratio


def _model(dtype="float32", seed=0):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((5,), dtype=dtype)
    hidden = keras.layers.Dense(4, dtype=dtype, name="dense", bias_initializer="random_normal")(inputs)
    normed = keras.layers.LayerNormalization(dtype=dtype, name="norm")(hidden)
    out = keras.layers.Dense(3, dtype=dtype, name="head", bias_initializer="zeros")(normed)
    return keras.Model(inputs, out)


def _gradients(model, seed=1):
    rng = np.random.default_rng(seed)
    return [tf.constant(rng.standard_normal(v.shape) * 0.1, dtype=v.dtype) for v in model.trainable_variables]


def _run(fused, steps=3, dtype="float32", graph=False, **kwargs):
    model = _model(dtype)
    opt = LARS(0.5, fused=fused, **kwargs)
    variables = model.trainable_variables
    history = []
    for step in range(steps):
        grads = _gradients(model, seed=step + 1)
        before = [v.numpy().astype(np.float64) for v in variables]
        if graph:
            tf.function(lambda gs: opt.apply_gradients(zip(gs, variables)))(grads)
        else:
            opt.apply_gradients(zip(grads, variables))
        history.append((before, [g.numpy() for g in grads]))
    return model, opt, history


def _check_against_numpy(fused, dtype="float32", graph=False, rtol=1e-6, **kwargs):
    model, opt, history = _run(fused, dtype=dtype, graph=graph, **kwargs)
    momentum = kwargs.get("momentum", 0.9)
    no_decay = kwargs.get("exclude_from_weight_decay")
    no_decay = [r"\bbias\b", r"\bgamma\b", r"\bbeta\b"] if no_decay is None else no_decay
    no_adapt = kwargs.get("exclude_from_layer_adaptation", no_decay)
    import re

    for i, var in enumerate(model.trainable_variables):
        w = history[0][0][i]
        v = np.zeros_like(w)
        for before, grads in history:
            w, v, _ = numpy_lars(before[i], v, grads[i], 0.5, momentum=momentum,
                                 weight_decay=kwargs.get("weight_decay", 1e-4),
                                 nesterov=kwargs.get("nesterov", False),
                                 adapt=not any(re.search(p, var.path) for p in no_adapt),
                                 decay=not any(re.search(p, var.path) for p in no_decay))
        velocity = opt._velocities[opt._get_variable_index(var)]
        assert velocity.dtype == ("float64" if dtype == "float64" else "float32"), velocity.dtype
        np.testing.assert_allclose(var.numpy().astype(np.float64), w, rtol=rtol, atol=rtol * 1e-2, err_msg=var.path)
        np.testing.assert_allclose(velocity.numpy(), v, rtol=rtol, atol=rtol * 1e-3, err_msg=var.path)
    return model, opt


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("nesterov", [False, True])
def test_matches_numpy_reference(fused, nesterov):
    _check_against_numpy(fused, nesterov=nesterov)


@pytest.mark.parametrize("fused", [True, False])
def test_matches_numpy_in_a_tf_function_with_nothing_excluded(fused):
    # Every variable adapted and decayed, including the zero-initialised head bias (ratio 1 at
    # the first step, as the zero-norm rule says, then adapted).
    _check_against_numpy(fused, graph=True, exclude_from_weight_decay=[], weight_decay=5e-3)


@pytest.mark.parametrize("fused", [True, False])
def test_excluded_variables_by_path(fused):
    model, _ = _check_against_numpy(fused, exclude_from_weight_decay=["head"],
                                    exclude_from_layer_adaptation=[r"dense/kernel"])
    assert [v.path for v in model.trainable_variables][:2] == ["dense/kernel", "dense/bias"]


@pytest.mark.parametrize("fused", [True, False])
def test_float64_variables(fused):
    _check_against_numpy(fused, dtype="float64", nesterov=True)


@pytest.mark.parametrize("fused", [True, False])
def test_float16_variables_with_float32_velocity(fused):
    # The weights are rounded to float16 after each step; the velocity stays float32.
    model, opt, history = _run(fused, steps=1, dtype="float16")
    for i, var in enumerate(model.trainable_variables):
        velocity = opt._velocities[i]
        assert var.dtype == "float16" and velocity.dtype == "float32"
        before, grads = history[0]
        exclude = any(s in var.path for s in ("bias", "gamma", "beta"))
        w, v, _ = numpy_lars(before[i], 0.0, grads[i].astype(np.float64), 0.5, adapt=not exclude, decay=not exclude)
        np.testing.assert_allclose(velocity.numpy(), v, rtol=1e-6, atol=1e-9, err_msg=var.path)
        np.testing.assert_allclose(var.numpy().astype(np.float64), w.astype(np.float16), rtol=1e-3, atol=1e-4)


def _model_garden(w, v, g, lr, momentum, beta, eta):
    # TF Model Garden's LARS: the decay joins the gradient before the norms.
    g = g + beta * w
    ratio = eta * np.linalg.norm(w) / np.linalg.norm(g)
    v = momentum * v + lr * ratio * g
    return w - v, v


def _contrib(w, v, g, lr, momentum, beta, eta):
    # TF 1.x contrib LARSOptimizer: the decay only in the ratio's denominator.
    ratio = eta * np.linalg.norm(w) / (np.linalg.norm(g) + beta * np.linalg.norm(w))
    v = momentum * v + lr * ratio * g
    return w - v, v


def test_other_formulas_agree_without_weight_decay_and_differ_with_it():
    rng = np.random.default_rng(3)
    w0, g = rng.standard_normal(50), rng.standard_normal(50) * 0.01
    for beta in (0.0, 1e-2):
        w = tf.Variable(w0.astype("float32"))
        v = tf.Variable(tf.zeros([50]))
        lars_ops.lars_update(w, v, tf.constant(g, tf.float32), 2.0, momentum=0.9, weight_decay=beta)
        ours, _, _ = numpy_lars(w0, 0.0, g, 2.0, weight_decay=beta)
        garden, _ = _model_garden(w0, 0.0, g, 2.0, 0.9, beta, 0.001)
        contrib, _ = _contrib(w0, 0.0, g, 2.0, 0.9, beta, 0.001)
        np.testing.assert_allclose(w.numpy(), ours, rtol=1e-6)
        if beta == 0:
            np.testing.assert_allclose(ours, garden, rtol=1e-12)
            np.testing.assert_allclose(ours, contrib, rtol=1e-12)
        else:  # the documented differences are real
            assert np.max(np.abs(ours - garden)) > 1e-4 and np.max(np.abs(ours - contrib)) > 1e-4


def test_fused_and_composed_agree_closely():
    a, _, _ = _run(True, steps=5, nesterov=True)
    b, _, _ = _run(False, steps=5, nesterov=True)
    for x, y in zip(a.trainable_variables, b.trainable_variables):
        np.testing.assert_allclose(x.numpy(), y.numpy(), rtol=1e-6, atol=1e-7)


def test_rescale_momentum_scales_every_velocity():
    _, opt, _ = _run(False, steps=2)
    before = [v.numpy().copy() for v in opt._velocities]
    assert all(np.any(b != 0) for b in before)
    opt.rescale_momentum(0.25)
    for b, v in zip(before, opt._velocities):
        np.testing.assert_allclose(v.numpy(), b * 0.25, rtol=1e-7)
    # float16 variables keep float32 velocities: scaled all the same.
    _, half, _ = _run(False, steps=1, dtype="float16")
    before = [v.numpy().copy() for v in half._velocities]
    half.rescale_momentum(2.0)
    for b, v in zip(before, half._velocities):
        assert v.dtype == "float32"
        np.testing.assert_array_equal(v.numpy(), b * 2.0)


def test_rescale_momentum_without_momentum_or_before_build_does_nothing():
    LARS(0.1).rescale_momentum(0.5)  # not built: no velocities yet
    _, opt, _ = _run(False, steps=1, momentum=0.0)
    before = [v.numpy().copy() for v in opt._velocities]
    opt.rescale_momentum(0.5)
    for b, v in zip(before, opt._velocities):
        np.testing.assert_array_equal(v.numpy(), b)


def test_zero_norm_variable_moves():
    w = tf.Variable(tf.zeros([4]))
    v = tf.Variable(tf.zeros([4]))
    ratio = lars_ops.lars_update(w, v, tf.ones([4]), 0.1, momentum=0.9)
    assert float(ratio) == 1.0 and np.allclose(w.numpy(), -0.1)


def test_fused_op_rejects_wrong_velocity_dtype_and_shape():
    w = tf.Variable(tf.ones([4], tf.float16))
    with pytest.raises(TypeError, match="velocity of a float16 variable must be float32"):
        lars_ops.lars_update(w, tf.Variable(tf.zeros([4], tf.float16)), tf.ones([4]), 0.1, momentum=0.9)
    with pytest.raises(tf.errors.InvalidArgumentError, match="must have one shape"):
        lars_ops.lars_update(tf.Variable(tf.ones([4])), tf.Variable(tf.zeros([3])), tf.ones([4]), 0.1, momentum=0.9)
    with pytest.raises(TypeError, match="not int32"):
        lars_ops.velocity_dtype(tf.int32)


def test_fused_op_does_not_touch_a_value_read_before():
    w = tf.Variable([3.0, 4.0])
    v = tf.Variable([0.0, 0.0])
    before = w.read_value()
    lars_ops.lars_update(w, v, tf.constant([0.3, 0.4]), 1.0, momentum=0.9)
    assert before.numpy().tolist() == [3.0, 4.0] and w.numpy()[0] < 3.0


def test_standard_keras_arguments_and_schedules():
    import tfring

    schedule = tfring.schedules.WarmUp(keras.optimizers.schedules.ExponentialDecay(0.5, 10, 0.9), warmup_steps=2)
    for kwargs in ({"clipnorm": 0.01}, {"global_clipnorm": 0.01}, {"clipvalue": 0.001}, {"use_ema": True},
                   {"gradient_accumulation_steps": 2}, {"learning_rate": schedule}):
        model = _model()
        model.compile(optimizer=LARS(**{"learning_rate": 0.5, **kwargs}), loss="mse")
        x = np.random.default_rng(0).standard_normal((32, 5)).astype("float32")
        before = [w.numpy() for w in model.trainable_weights]
        model.fit(x, np.zeros((32, 3), "float32"), batch_size=8, epochs=1, verbose=0)
        after = [w.numpy() for w in model.trainable_weights]
        assert all(np.all(np.isfinite(a)) for a in after), kwargs
        assert any(not np.array_equal(a, b) for a, b in zip(before, after)), kwargs


def test_clipnorm_is_applied_before_the_update():
    # With clipnorm the update must equal the reference on clipped gradients.
    model = _model()
    opt = LARS(0.5, clipnorm=0.05, exclude_from_weight_decay=[])
    grads = _gradients(model)
    before = [v.numpy() for v in model.trainable_variables]
    opt.apply_gradients(zip(grads, model.trainable_variables))
    for b, g, var in zip(before, grads, model.trainable_variables):
        g = g.numpy().astype(np.float64)
        g = g * min(1.0, 0.05 / np.linalg.norm(g))
        w, _, _ = numpy_lars(b, 0.0, g, 0.5)
        np.testing.assert_allclose(var.numpy(), w, rtol=1e-5, atol=1e-7, err_msg=var.path)


def test_loss_scale_optimizer_sees_unscaled_gradients():
    model = _model()
    inner = LARS(0.5, exclude_from_weight_decay=[])
    opt = keras.optimizers.LossScaleOptimizer(inner, initial_scale=1024.0)
    grads = _gradients(model)
    before = [v.numpy() for v in model.trainable_variables]
    opt.apply_gradients(zip([g * 1024.0 for g in grads], model.trainable_variables))
    for b, g, var in zip(before, grads, model.trainable_variables):
        w, _, _ = numpy_lars(b, 0.0, g.numpy(), 0.5)
        np.testing.assert_allclose(var.numpy(), w, rtol=1e-5, atol=1e-7, err_msg=var.path)


def test_config_round_trip_and_keras_file(tmp_path):
    opt = LARS(0.2, momentum=0.8, nesterov=True, weight_decay=5e-4, trust_coefficient=0.002, epsilon=1e-9,
               exclude_from_layer_adaptation=["norm"], exclude_from_weight_decay=["bias"], clipnorm=1.0)
    config = opt.get_config()
    again = LARS.from_config(config)
    assert again.get_config() == config
    model = _model()
    model.compile(optimizer=opt, loss="mse")
    x = np.random.default_rng(0).standard_normal((16, 5)).astype("float32")
    model.fit(x, np.zeros((16, 3), "float32"), epochs=1, verbose=0)
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert isinstance(loaded.optimizer, LARS)
    assert loaded.optimizer.get_config() == model.optimizer.get_config()
    for a, b in zip(model.optimizer.variables, loaded.optimizer.variables):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


MIRRORED = r"""
import os, sys
import numpy as np
import tensorflow as tf
import keras
sys.path.insert(0, os.environ["HERE"])
from lars_test import _model
from tfring.optimizers import LARS

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
x = np.random.default_rng(0).standard_normal((64, 5)).astype("float32")
y = np.random.default_rng(1).standard_normal((64, 3)).astype("float32")
for batch, epochs in ((64, 1), (16, 2)):
    weights = []
    for strategy in (tf.distribute.get_strategy(), tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])):
        with strategy.scope():
            model = _model()
            model.compile(optimizer=LARS(0.5, nesterov=True), loss="mse")
        model.fit(x, y, batch_size=batch, epochs=epochs, shuffle=False, verbose=0)
        weights.append([w.numpy() for w in model.weights])
    print("STEPS", 64 // batch * epochs, "MAXDIFF", max(float(np.max(np.abs(a - b))) for a, b in zip(*weights)))
"""


@pytest.mark.multiprocess
def test_mirrored_strategy_equals_no_strategy(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "mirrored.py"
    script.write_text(MIRRORED)
    env = dict(os.environ, HERE=os.path.dirname(os.path.abspath(__file__)), TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    diffs = {int(l.split()[1]): float(l.split()[3]) for l in proc.stdout.splitlines() if l.startswith("STEPS")}
    # One step: the same update up to float rounding of the averaged gradients. Over 8 steps those
    # rounding differences grow (LARS normalises each gradient, so small gradients' directions
    # are sensitive): SGD with momentum drifts ~2e-6 on the same data, LARS ~4e-5.
    assert diffs[1] < 1e-6 and diffs[8] < 2e-4, proc.stdout


@pytest.mark.parametrize("kwargs,needle", [
    ({"momentum": -0.1}, "momentum must be >= 0"),
    ({"weight_decay": -1.0}, "weight_decay must be >= 0"),
    ({"trust_coefficient": 0.0}, "trust_coefficient must be > 0"),
    ({"epsilon": "small"}, "epsilon must be a number"),
    ({"exclude_from_weight_decay": "bias"}, "must be a list of regular expressions"),
    ({"exclude_from_layer_adaptation": ["("]}, "invalid regular expression"),
    ({"fused": "yes"}, "fused must be"),
])
def test_bad_arguments(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        LARS(**kwargs)


def test_fused_true_under_xla_is_a_clear_error():
    model = _model()
    model.compile(optimizer=LARS(0.1, fused=True), loss="mse", jit_compile=True)
    with pytest.raises(Exception, match="fused op cannot run here: the function is compiled with XLA"):
        model.fit(np.zeros((8, 5), "float32"), np.zeros((8, 3), "float32"), verbose=0)


def test_xla_uses_the_composed_update():
    model = _model()
    model.compile(optimizer=LARS(0.1), loss="mse", jit_compile=True)
    model.fit(np.ones((8, 5), "float32"), np.zeros((8, 3), "float32"), verbose=0)
    assert all(np.all(np.isfinite(w.numpy())) for w in model.weights)


class _PlacedVariable:
    """Stands in for a variable on another device (this machine has no GPU)."""

    def __init__(self, device, dtype):
        self.device, self.dtype = device, dtype


def test_fused_op_on_gpu_variables_only_with_gpu_kernels(monkeypatch):
    gpu = "/job:localhost/replica:0/task:0/device:GPU:0"
    monkeypatch.setattr(lars_ops._library, "has_gpu_kernels", lambda: False)
    assert "built without GPU kernels" in lars_ops.fused_unavailable_reason(_PlacedVariable(gpu, tf.float32))
    monkeypatch.setattr(lars_ops._library, "has_gpu_kernels", lambda: True)
    assert lars_ops.fused_unavailable_reason(_PlacedVariable(gpu, tf.float32)) is None
    assert lars_ops.fused_unavailable_reason(_PlacedVariable(gpu, tf.float16)) is None
    assert "not float64" in lars_ops.fused_unavailable_reason(_PlacedVariable(gpu, tf.float64))
    assert "CPU and GPU kernels only" in lars_ops.fused_unavailable_reason(
        _PlacedVariable("/job:localhost/replica:0/task:0/device:TPU:0", tf.float32))
    assert lars_ops.fused_unavailable_reason(_PlacedVariable("/device:CPU:0", tf.float64)) is None
