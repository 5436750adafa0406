"""PowerSGD against NumPy, in one process (a job of one rank: every allreduce is an identity)."""

import numpy as np
import pytest
import tensorflow as tf

from tfring.compression import powersgd
from tfring.compression import runner


def _step(compressor, state, grads, variables=None, op="mean"):
    return runner.run(compressor, state, [grads], op, overlap=False, size=1, variables=[variables])[0]


def _numpy_orthonormal(p):
    q, r = np.linalg.qr(p)
    return q * np.sign(np.diag(r))  # Gram-Schmidt's signs: a positive diagonal of R


def test_which_gradients_are_compressed():
    c = powersgd.PowerSGD(rank=4)
    assert c.matrix([512, 256], tf.float32) == (512, 256, 4)
    assert c.matrix([3, 3, 64, 128], tf.float32) == (576, 128, 4)  # a conv kernel: inputs by output channels
    assert c.matrix([256], tf.float32) is None  # a bias
    assert c.matrix([16, 16], tf.float32) is None  # (16 + 16) * 4 * 2 >= 256: nothing to gain
    assert c.matrix([512, 256], tf.int32) is None
    assert powersgd.PowerSGD(rank=2, min_compression_rate=1).matrix([3, 100], tf.float32) == (3, 100, 2)


def test_orthonormal_columns_match_numpy_and_keep_zero_columns_zero():
    p = np.random.default_rng(0).standard_normal((50, 4)).astype("float32")
    np.testing.assert_allclose(powersgd.orthonormal_columns(tf.constant(p)), _numpy_orthonormal(p), atol=1e-5)
    p[:, 1] = 0.0
    p[:, 3] = p[:, 0] * 2.0  # dependent on an earlier column: its rounding noise, normalised
    out = powersgd.orthonormal_columns(tf.constant(p)).numpy()
    assert np.all(np.isfinite(out))
    assert np.all(out[:, 1] == 0.0) and np.linalg.norm(out[:, 3]) < 1.001


def test_one_compressed_step_is_numpys_power_iteration_with_error_feedback():
    rng = np.random.default_rng(1)
    g = rng.standard_normal((40, 30)).astype("float32")
    bias = rng.standard_normal(30).astype("float32")
    variable = tf.Variable(tf.zeros([40, 30]))
    compressor = powersgd.PowerSGD(rank=3, start_iter=2)
    state = compressor.new_state()
    for _ in range(2):  # the warm-up: exact
        out = _step(compressor, state, [tf.constant(g), tf.constant(bias)], [variable, None])
        np.testing.assert_array_equal(out[0], g)
        np.testing.assert_array_equal(out[1], bias)
    assert int(state.iteration.numpy()) == 2
    q0 = state.memories("q")[0].numpy()
    out = _step(compressor, state, [tf.constant(g), tf.constant(bias)], [variable, None])
    p = _numpy_orthonormal(g @ q0)
    q = g.T @ p
    np.testing.assert_allclose(out[0], p @ q.T, atol=1e-4)
    np.testing.assert_array_equal(out[1], bias)  # a vector travels exactly
    np.testing.assert_allclose(state.memories("error")[0].numpy(), g - p @ q.T, atol=1e-4)
    np.testing.assert_allclose(state.memories("q")[0].numpy(), q, atol=1e-4)  # the warm start of the next step
    assert int(state.iteration.numpy()) == 3


def test_a_matrix_of_rank_r_comes_through_whole():
    rng = np.random.default_rng(2)
    g = (rng.standard_normal((64, 2)) @ rng.standard_normal((2, 48))).astype("float32")
    compressor = powersgd.PowerSGD(rank=2, start_iter=2)
    state = compressor.new_state()
    v = tf.Variable(tf.zeros([64, 48]))
    for _ in range(3):
        out = _step(compressor, state, [tf.constant(g)], [v])
    np.testing.assert_allclose(out[0], g, atol=1e-4)


@pytest.mark.parametrize("error_feedback", [True, False])
def test_error_feedback_keeps_the_applied_sum_close_to_the_true_sum(error_feedback):
    rng = np.random.default_rng(3)
    compressor = powersgd.PowerSGD(rank=2, start_iter=2, error_feedback=error_feedback)
    state = compressor.new_state()
    v = tf.Variable(tf.zeros([32, 32]))
    step = tf.function(lambda g: _step(compressor, state, [g], [v])[0])
    base = rng.standard_normal((32, 32)).astype("float32")  # a full-rank drift every step shares
    true_sum, applied_sum, gaps = np.zeros((32, 32)), np.zeros((32, 32)), {}
    for t in range(1, 201):
        g = base + 0.5 * rng.standard_normal((32, 32)).astype("float32")
        true_sum += g
        applied_sum += step(tf.constant(g)).numpy()
        gaps[t] = np.linalg.norm(true_sum - applied_sum) / np.linalg.norm(true_sum)
    if error_feedback:
        # What was not applied is exactly the residual still in memory; it stays bounded, so the
        # relative gap shrinks as 1/steps (0.15 after 50 steps, 0.04 after 200 when written).
        np.testing.assert_allclose(true_sum - applied_sum, state.memories("error")[0].numpy(), atol=1e-2)
        assert gaps[200] < 0.1 and gaps[200] < gaps[50] / 2.5, gaps
    else:
        assert gaps[200] > 0.5, gaps  # rank 2 of a full-rank drift loses most of it, every step


def test_narrow_mixed_and_zero_gradients():
    compressor = powersgd.PowerSGD(rank=2, start_iter=2)
    state = compressor.new_state()
    grads = [tf.zeros([32, 32]), tf.random.stateless_normal([32, 24], [0, 1], dtype=tf.float16),
             tf.ones([5], tf.float64), tf.constant([3], tf.int32)]
    variables = [tf.Variable(tf.zeros(g.shape, g.dtype)) for g in grads]
    for _ in range(3):
        out = _step(compressor, state, grads, variables)
    assert [o.dtype for o in out] == [tf.float32, tf.float16, tf.float64, tf.int32]
    assert np.all(out[0].numpy() == 0.0)  # a zero gradient: zero, not NaN
    assert np.all(np.isfinite(out[1].numpy()))
    assert [m.dtype for m in state.memories("error")] == [tf.float32, tf.float32]  # computed in float32


def test_overflowed_gradients_leave_the_memories_as_they_were():
    compressor = powersgd.PowerSGD(rank=2, start_iter=2)
    state = compressor.new_state()
    v = tf.Variable(tf.zeros([32, 32]))
    g = tf.random.stateless_normal([32, 32], [0, 2])
    for _ in range(3):
        _step(compressor, state, [g], [v])
    before = [m.numpy() for m in state.memories()]
    out = _step(compressor, state, [tf.tensor_scatter_nd_update(g, [[0, 0]], [np.inf])], [v])
    assert not np.all(np.isfinite(out[0].numpy()))  # the loss scale sees the overflow and skips the step
    for b, m in zip(before, state.memories()):
        np.testing.assert_array_equal(b, m.numpy())


def test_a_traced_step_keeps_its_memories_per_variable_across_traces():
    compressor = powersgd.PowerSGD(rank=2, start_iter=2)
    state = compressor.new_state()
    v = tf.Variable(tf.zeros([32, 32]))

    @tf.function
    def step(g):
        return _step(compressor, state, [g], [v])[0]

    g = tf.random.stateless_normal([32, 32], [0, 3])
    eager_state = compressor.new_state()
    for _ in range(4):
        traced = step(g)
        eager = _step(compressor, eager_state, [g], [v])[0]
    np.testing.assert_allclose(traced, eager, atol=1e-5)
    step.experimental_get_tracing_count()
    tf.function(lambda g: _step(compressor, state, [g], [v])[0])(g)  # another trace: the same memories
    assert len(state.memories()) == 2 and int(state.iteration.numpy()) == 5


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="rank must be >= 1"):
        powersgd.PowerSGD(rank=0)
    with pytest.raises(ValueError, match="start_iter must be >= 2 with warm_start or error_feedback"):
        powersgd.PowerSGD(start_iter=1)
    powersgd.PowerSGD(start_iter=0, warm_start=False, error_feedback=False)
