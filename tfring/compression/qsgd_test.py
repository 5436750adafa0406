"""QSGD against NumPy, in one process (a job of one rank: every collective is an identity)."""

import numpy as np
import pytest
import tensorflow as tf

from tfring.compression import qsgd
from tfring.compression import runner


def _seed(k):
    return tf.constant([k, 0], tf.int64)


def test_levels_are_int8_of_each_segments_largest_magnitude():
    x = np.array([[127.0, -63.0, 0.0, 2.0, 0.5, -0.25, 0.0, 0.0]], "float32")  # segments of 4, 2, and 2 of padding
    scales, levels = qsgd.quantize(tf.constant(x), [[4, 2, 2]], _seed(0))
    np.testing.assert_allclose(scales, [[127.0, 0.5, 0.0]])
    assert levels.dtype == tf.uint8
    as_int8 = tf.bitcast(levels, tf.int8).numpy()[0]
    assert as_int8[:3].tolist() == [127, -63, 0] and as_int8[4] == 127 and as_int8[6:].tolist() == [0, 0]
    assert as_int8[3] in (2, 3) and as_int8[5] in (-64, -63)  # between the two nearest levels
    np.testing.assert_allclose(qsgd.dequantize(scales, levels, [[4, 2, 2]])[0, :3], x[0, :3])


def test_rounding_is_exact_on_average_and_never_more_than_one_level_off():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((1, 64)) * np.linspace(0.01, 10.0, 64)).astype("float32")
    lengths = [[16, 48]]
    scales, _ = qsgd.quantize(tf.constant(x), lengths, _seed(0))
    step = np.repeat(scales.numpy()[0] / 127.0, [16, 48])
    draws = np.stack([qsgd.dequantize(*qsgd.quantize(tf.constant(x), lengths, _seed(k)), lengths).numpy()[0]
                      for k in range(400)])
    assert np.all(np.abs(draws - x[0]) <= step * (1 + 1e-5))
    # The mean of 400 draws: within 4 standard errors (each draw's spread is at most half a level).
    assert np.all(np.abs(draws.mean(axis=0) - x[0]) <= 4 * 0.5 * step / np.sqrt(400))
    again = qsgd.dequantize(*qsgd.quantize(tf.constant(x), lengths, _seed(3)), lengths).numpy()[0]
    np.testing.assert_array_equal(again, draws[3])  # the same seed rounds the same way


def test_one_step_is_within_two_levels_with_no_memory_and_integers_exact():
    rng = np.random.default_rng(1)
    g1, g2 = rng.standard_normal((5, 3)).astype("float32"), 1e-3 * rng.standard_normal(4).astype("float32")
    ints = tf.constant([7, 8], tf.int32)
    variables = [tf.Variable(tf.zeros(g1.shape)), tf.Variable(tf.zeros(g2.shape)), tf.Variable([0, 0])]
    compressor = qsgd.QSGD()
    state = compressor.new_state()
    out = runner.run(compressor, state, [[tf.constant(g1), tf.constant(g2), ints]], "mean", overlap=False, size=1,
                     variables=[variables])[0]
    # Rounded twice (by the worker, then by the chunk's owner): at most two levels of each tensor's scale.
    for got, g in ((out[0], g1), (out[1], g2)):
        assert np.max(np.abs(got.numpy() - g)) <= 2 * np.max(np.abs(g)) / 127 * (1 + 1e-5)
    np.testing.assert_array_equal(out[2], ints)
    assert state.memories() == [] and int(state.iteration.numpy()) == 1


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="warmup_steps must be >= 0"):
        qsgd.QSGD(warmup_steps=-1)
