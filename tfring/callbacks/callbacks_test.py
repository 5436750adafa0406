"""Warm-up and decay callbacks, graph-side schedules and the LR scaling rule (one process)."""

import math
import os

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

import tfring  # noqa: E402
from tfring import callbacks  # noqa: E402
from tfring import schedules  # noqa: E402


class Recorder(keras.callbacks.Callback):
    """The rate each batch trains with, read after every callback has set it."""

    def __init__(self):
        super().__init__()
        self.rates = []

    def on_train_batch_end(self, batch, logs=None):
        self.rates.append(float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate)))


def _fit(optimizer, cbs, epochs=4, n=32, batch=8, **fit_kwargs):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer=optimizer, loss="mse")
    recorder = Recorder()
    x = np.random.default_rng(0).standard_normal((n, 3)).astype("float32")
    hist = model.fit(x, np.zeros((n, 2), "float32"), batch_size=batch, epochs=epochs, verbose=0,
                     callbacks=list(cbs) + [recorder], shuffle=False, **fit_kwargs)
    return recorder.rates, hist, model


def test_horovod_call_means_what_it_means_in_horovod():
    # hvd.callbacks.LearningRateWarmupCallback(initial_lr, warmup_epochs, momentum_correction,
    # steps_per_epoch, verbose): initial_lr is the rate warm-up ends at, positional first.
    cb = callbacks.LearningRateWarmup(0.8, 2, True, None, 0, start_lr=0.2)
    rates, _, _ = _fit(keras.optimizers.SGD(0.1), [cb], epochs=3)
    np.testing.assert_allclose(rates, [0.2 + 0.6 * (b / 4) / 2 for b in range(8)] + [0.8] * 4, rtol=1e-6)
    with pytest.raises(TypeError, match="target_lr"):
        callbacks.LearningRateWarmup(warmup_epochs=1, target_lr=0.5)  # the old, non-Horovod name


def test_gradual_warmup_then_step_decay_per_batch():
    # 4 batches per epoch; warm-up 2 epochs from 0.1 to 0.8; x0.1 at epoch 3.
    rates, hist, _ = _fit(keras.optimizers.SGD(0.8, momentum=0.9),
                          [callbacks.LearningRateWarmup(warmup_epochs=2, start_lr=0.1),
                           callbacks.MultiStepDecay(milestones=[3], factor=0.1)], epochs=4)
    expected = [0.1 + 0.7 * (b / 4) / 2 for b in range(8)] + [0.8] * 4 + [0.08] * 4
    np.testing.assert_allclose(rates, expected, rtol=1e-6)
    np.testing.assert_allclose(hist.history["learning_rate"], [expected[3], expected[7], 0.8, 0.08], rtol=1e-6)


def test_warmup_defaults_follow_horovod():
    # On one process the default start is target / 1 = target: nothing to warm up (as Horovod),
    # and a warning says so, once.
    with pytest.warns(UserWarning, match="changes nothing") as caught:
        rates, _, _ = _fit(keras.optimizers.SGD(0.4), [callbacks.LearningRateWarmup(warmup_epochs=1)], epochs=2)
    assert sum("changes nothing" in str(w.message) for w in caught) == 1
    np.testing.assert_allclose(rates, [0.4] * 8, rtol=1e-6)
    # Horovod's multiplier (1/size)(e(size-1)/warmup + 1) is our ramp from target/size.
    cb = callbacks.LearningRateWarmup(warmup_epochs=5)
    cb._steps, cb._target, cb._initial = 10, 3.2, 3.2 / 8
    for epoch, batch in ((0, 0), (1, 3), (4, 9)):
        e = epoch + batch / 10
        np.testing.assert_allclose(cb.learning_rate_at(epoch, batch), 3.2 / 8 * (e * 7 / 5 + 1), rtol=1e-12)
    assert cb.learning_rate_at(5, 0) is None


def test_constant_warmup():
    rates, _, _ = _fit(keras.optimizers.SGD(1.0),
                       [callbacks.LearningRateWarmup(warmup_epochs=1, start_lr=0.25, mode="constant")], epochs=2)
    np.testing.assert_allclose(rates, [0.25] * 4 + [1.0] * 4)


def test_momentum_correction_scales_the_velocity():
    opt = keras.optimizers.SGD(1.0, momentum=0.9)
    cb = callbacks.LearningRateWarmup(warmup_epochs=1, start_lr=0.5)
    _, _, model = _fit(opt, [cb], epochs=1)
    old = float(opt.learning_rate.numpy())
    before = [m.numpy().copy() for m in opt.momentums]
    assert any(np.any(b != 0) for b in before)
    cb.set_learning_rate(old * 0.5)  # the rate halves: so does the velocity
    for b, m in zip(before, opt.momentums):
        np.testing.assert_allclose(m.numpy(), b * 0.5, rtol=1e-6)
    off = callbacks.LearningRateWarmup(warmup_epochs=1, momentum_correction=False)
    off.set_model(model)
    before = [m.numpy().copy() for m in opt.momentums]
    off.set_learning_rate(0.1)
    for b, m in zip(before, opt.momentums):
        np.testing.assert_array_equal(m.numpy(), b)


class HookedSGD(keras.optimizers.SGD):
    """Any optimizer with a `rescale_momentum(factor)` hook (duck-typed, as LARS)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.factors = []

    def rescale_momentum(self, factor):
        self.factors.append(factor)


def test_momentum_correction_calls_the_optimizers_hook():
    opt = HookedSGD(1.0, momentum=0.9)
    cb = callbacks.LearningRateWarmup(warmup_epochs=1, start_lr=0.5)
    _, _, model = _fit(opt, [cb], epochs=1)
    opt.factors.clear()
    old = float(opt.learning_rate.numpy())
    cb.set_learning_rate(0.25)
    cb.set_learning_rate(0.25)  # no change: no correction
    assert opt.factors == [0.25 / old]
    off = callbacks.LearningRateWarmup(warmup_epochs=1, momentum_correction=False)
    off.set_model(model)
    off.set_learning_rate(0.1)
    assert len(opt.factors) == 1


def test_momentum_correction_rescales_lars_velocities():
    opt = tfring.optimizers.LARS(1.0, momentum=0.9)
    cb = callbacks.LearningRateWarmup(warmup_epochs=1, start_lr=0.5)
    _fit(opt, [cb], epochs=1)
    old = float(opt.learning_rate.numpy())
    before = [v.numpy().copy() for v in opt._velocities]
    assert any(np.any(b != 0) for b in before)
    cb.set_learning_rate(old * 0.5)
    for b, v in zip(before, opt._velocities):
        np.testing.assert_allclose(v.numpy(), b * 0.5, rtol=1e-6)


def test_callbacks_count_in_epochs():
    cb = callbacks.PolynomialDecay(end_epoch=3)
    cb._steps = 4
    assert [cb.epochs_done(e, b) for e, b in ((0, 0), (0, 1), (2, 3))] == [0.0, 0.25, 2.75]


def test_polynomial_decay_callback():
    rates, _, _ = _fit(keras.optimizers.SGD(1.0), [callbacks.PolynomialDecay(end_epoch=3, start_epoch=1, power=2.0,
                                                                             end_lr=0.1)], epochs=4)
    expected = [1.0] * 4 + [(0.9 * (1 - (b / 4) / 2) ** 2 + 0.1) for b in range(4)] + \
               [(0.9 * (1 - (1 + b / 4) / 2) ** 2 + 0.1) for b in range(4)] + [0.1] * 4
    np.testing.assert_allclose(rates, expected, rtol=1e-6)


def test_resnet_recipe_in_one_line():
    # 5-epoch warm-up, x0.1 at 30/60/80 (scaled down: 2 batches per epoch, 90 epochs).
    rates, _, _ = _fit(keras.optimizers.SGD(3.2, momentum=0.9),
                       [callbacks.LearningRateWarmup(warmup_epochs=5, start_lr=0.1), callbacks.MultiStepDecay([30, 60, 80])],
                       epochs=90, n=4, batch=2)
    per_epoch = rates[1::2]
    np.testing.assert_allclose([per_epoch[e] for e in (10, 29, 30, 59, 60, 80, 89)],
                               [3.2, 3.2, 0.32, 0.32, 0.032, 0.0032, 0.0032], rtol=1e-5)
    assert rates[0] == pytest.approx(0.1) and rates[9] < 3.2


@pytest.mark.parametrize("make,needle", [
    (lambda: callbacks.LearningRateWarmup(warmup_epochs=-1), "warmup_epochs must be >= 0"),
    (lambda: callbacks.LearningRateWarmup(mode="linear"), "mode must be"),
    (lambda: callbacks.LearningRateWarmup(steps_per_epoch=0), "steps_per_epoch must be a positive int"),
    (lambda: callbacks.LearningRateWarmup(initial_lr=-0.1), "initial_lr must be a number >= 0"),
    (lambda: callbacks.MultiStepDecay(milestones=[30, 20]), "strictly increasing"),
    (lambda: callbacks.MultiStepDecay(milestones=[]), "must not be empty"),
    (lambda: callbacks.MultiStepDecay(milestones=[0, 5]), "positive whole numbers"),
    (lambda: callbacks.MultiStepDecay(factor=0), "factor must be a number > 0"),
    (lambda: callbacks.PolynomialDecay(end_epoch=5, start_epoch=5), "must be after start_epoch"),
    (lambda: callbacks.PolynomialDecay(end_epoch=5, power=-1), "power must be"),
    (lambda: schedules.WarmUp(0.1, warmup_steps=-3), "warmup_steps must be >= 0"),
    (lambda: schedules.WarmUp(0.1, 10, mode="cosine"), "mode must be"),
    (lambda: schedules.MultiStepDecay(0.1, [5, 5]), "strictly increasing"),
    (lambda: tfring.scale_learning_rate(0.1, 0), "global_batch_size must be a positive number"),
    (lambda: tfring.scale_learning_rate(0.1, 512, rule="log"), "rule must be"),
])
def test_bad_arguments(make, needle):
    with pytest.raises(ValueError, match=needle):
        make()


def test_warmup_longer_than_training():
    with pytest.raises(ValueError, match="warm-up \\(5 epochs\\) is longer than the training \\(2 epochs\\)"):
        _fit(keras.optimizers.SGD(0.1), [callbacks.LearningRateWarmup(warmup_epochs=5)], epochs=2)


def test_callback_refuses_an_optimizer_built_with_a_schedule():
    with pytest.raises(ValueError, match="built with a learning-rate schedule"):
        _fit(keras.optimizers.SGD(schedules.MultiStepDecay(0.1, [10])), [callbacks.LearningRateWarmup(warmup_epochs=1)], epochs=2)


def test_unknown_steps_per_epoch():
    ds = tf.data.Dataset.from_tensor_slices((np.zeros((8, 3), "float32"), np.zeros((8, 2), "float32")))
    ds = ds.filter(lambda x, y: True).batch(4)  # unknown cardinality
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    with pytest.raises(ValueError, match="pass steps_per_epoch="):
        model.fit(ds, epochs=1, verbose=0, callbacks=[callbacks.LearningRateWarmup(warmup_epochs=1)])
    model.fit(ds, epochs=1, verbose=0, callbacks=[callbacks.LearningRateWarmup(warmup_epochs=1, steps_per_epoch=2)])


def test_schedules_values_and_serialization():
    lr = schedules.WarmUp(schedules.MultiStepDecay(3.2, [30, 60, 80]), warmup_steps=5, initial_learning_rate=0.1)
    values = [float(lr(s)) for s in (0, 1, 4, 5, 29, 30, 61, 85)]
    np.testing.assert_allclose(values, [0.1, 0.1 + 3.1 / 5, 0.1 + 4 * 3.1 / 5, 3.2, 3.2, 0.32, 0.032, 0.0032],
                               rtol=1e-6)
    again = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(lr))
    assert isinstance(again, schedules.WarmUp) and isinstance(again.schedule, schedules.MultiStepDecay)
    assert [float(again(s)) for s in (0, 1, 4, 5, 29, 30, 61, 85)] == values
    constant = schedules.WarmUp(schedules.PolynomialDecay(1.0, 100, end_learning_rate=0.0, power=2.0), 10,
                                initial_learning_rate=0.2, mode="constant")
    np.testing.assert_allclose([float(constant(s)) for s in (0, 9, 10, 50)],
                               [0.2, 0.2, (1 - 0.1) ** 2, (1 - 0.5) ** 2], rtol=1e-6)


def test_optimizer_with_schedule_saves_and_loads(tmp_path):
    lr = schedules.WarmUp(schedules.MultiStepDecay(0.4, [6]), warmup_steps=4, initial_learning_rate=0.0)
    _, hist, model = _fit(tfring.optimizers.LARS(lr), [], epochs=2)
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert isinstance(loaded.optimizer._learning_rate, schedules.WarmUp)
    assert float(loaded.optimizer.learning_rate) == pytest.approx(float(model.optimizer.learning_rate))


def test_scale_learning_rate():
    assert tfring.scale_learning_rate(0.1, 8192) == pytest.approx(3.2)
    assert tfring.scale_learning_rate(0.1, 1024, rule="sqrt") == pytest.approx(0.2)
    assert tfring.scale_learning_rate(0.1, 512, base_batch_size=32) == pytest.approx(1.6)
    assert tfring.scale_learning_rate(0.1, 512, base_batch_size=32, rule="sqrt") == pytest.approx(0.1 * math.sqrt(16))
