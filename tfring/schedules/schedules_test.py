"""Each schedule's formula: the same on Python numbers (the callbacks) as on tensors (the schedules)."""

import os

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from tfring.schedules import multi_step_decay  # noqa: E402
from tfring.schedules import polynomial_decay  # noqa: E402
from tfring.schedules import warm_up  # noqa: E402

POSITIONS = [0.0, 0.25, 1.0, 2.5, 4.75, 29.0, 30.0, 61.5, 90.0]


@pytest.mark.parametrize("mode", warm_up.MODES)
def test_warm_up_rate_on_numbers_and_tensors(mode):
    for p in POSITIONS[:5]:
        number = warm_up.warm_up_rate(p, 5.0, 0.1, 3.2, mode)
        tensor = warm_up.warm_up_rate(tf.constant(p, tf.float64), 5.0, 0.1, 3.2, mode)
        assert isinstance(number, float)
        assert float(tensor) == number
    assert warm_up.warm_up_rate(0.0, 5, 0.1, 3.2) == 0.1
    assert warm_up.warm_up_rate(2.5, 5, 0.0, 2.0) == 1.0


def test_multi_step_rate_on_numbers_and_tensors():
    for p in POSITIONS:
        number = multi_step_decay.multi_step_rate(p, 3.2, [30, 60, 80], 0.1)
        tensor = multi_step_decay.multi_step_rate(tf.constant(p, tf.float64), 3.2, [30, 60, 80], 0.1)
        assert float(tensor) == number
    assert multi_step_decay.multi_step_rate(60, 1.0, [30, 60, 80], 0.5) == 0.25


def test_the_schedules_evaluate_their_formulas():
    schedule = multi_step_decay.MultiStepDecay(3.2, [30, 60, 80], 0.1)
    np.testing.assert_allclose([float(schedule(s)) for s in (0, 29, 30, 61, 85)],
                               [multi_step_decay.multi_step_rate(s, 3.2, [30, 60, 80], 0.1) for s in (0, 29, 30, 61, 85)],
                               rtol=1e-6)
    warm = warm_up.WarmUp(2.0, warmup_steps=8, initial_learning_rate=0.4)
    np.testing.assert_allclose([float(warm(s)) for s in range(8)],
                               [warm_up.warm_up_rate(s, 8, 0.4, 2.0) for s in range(8)], rtol=1e-6)


def test_polynomial_decay_rate_is_keras_polynomial_decay():
    for power in (0.5, 1.0, 2.0):
        keras_schedule = polynomial_decay.PolynomialDecay(1.5, 40, end_learning_rate=0.01, power=power)
        for p in (0, 1, 13, 39, 40, 55):
            np.testing.assert_allclose(polynomial_decay.polynomial_decay_rate(p, 40, 1.5, 0.01, power),
                                       float(keras_schedule(p)), rtol=1e-6)
    assert polynomial_decay.PolynomialDecay is keras.optimizers.schedules.PolynomialDecay
    assert polynomial_decay.polynomial_decay_rate(5, 10, 1.0, 0.0, 2.0) == 0.25
