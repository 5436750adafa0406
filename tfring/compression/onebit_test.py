"""1-bit compression against NumPy, in one process (a job of one rank: every collective is an identity)."""

import numpy as np
import pytest
import tensorflow as tf

from tfring.compression import compressed_allreduce
from tfring.compression import onebit
from tfring.compression import runner


def _step(compressor, state, grads, variables, op="mean"):
    return runner.run(compressor, state, [grads], op, overlap=False, size=1, variables=[variables])[0]


def _numpy_compress(x, sizes):
    """Each segment of `sizes` elements (in order) signed and scaled by its own norm / sqrt(size)."""
    out = []
    for part in np.split(x, np.cumsum(sizes)[:-1]):
        out.append(np.where(part >= 0, 1.0, -1.0).astype("float32") * np.linalg.norm(part) / np.sqrt(part.size))
    return np.concatenate(out)


def test_signs_pack_eight_to_a_byte_and_unpack_with_their_scale():
    x = np.array([[3.0, -4.0, 0.0, -1.0, 2.0, 2.0, -2.0, 5.0, 1.0, 1.0, 1.0, 1.0, -1.0, -1.0, -1.0, -1.0]], "float32")
    scales, bits = onebit.compress_chunks(tf.constant(x), [[16]])
    assert bits.dtype == tf.uint8 and bits.numpy().tolist() == [[0b10101101, 0b11110000]]
    np.testing.assert_allclose(scales, [[np.linalg.norm(x) / 4.0]], rtol=1e-6)
    back = onebit.decompress_chunks(scales, bits, [[16]]).numpy()
    np.testing.assert_allclose(back, np.where(x >= 0, 1.0, -1.0) * scales.numpy()[0], rtol=1e-6)


def test_each_segment_keeps_its_own_scale_and_padding_counts_for_nothing():
    # Two tensors a thousand times apart in one chunk, then padding: three scales.
    x = np.array([[2.0, -2.0, 2.0, 0.001, -0.003, 0.0, 0.0, 0.0]], "float32")
    scales, bits = onebit.compress_chunks(tf.constant(x), [[3, 2, 3]])
    np.testing.assert_allclose(scales, [[2.0, np.sqrt(0.00001 / 2), 0.0]], rtol=1e-5)  # 2.0: over 3 elements, not 8
    back = onebit.decompress_chunks(scales, bits, [[3, 2, 3]]).numpy()[0]
    np.testing.assert_allclose(back[:5], np.sign(x[0, :5]) * np.repeat(scales.numpy()[0, :2], [3, 2]), rtol=1e-6)
    np.testing.assert_array_equal(back[5:], 0.0)


def test_the_layout_cuts_at_tensors_chunks_and_padding():
    layout = compressed_allreduce.Layout([5, 3, 20], parts=2, chunks=2)  # 28 elements: 2 parts of 2 chunks of 8
    assert (layout.chunk, layout.part) == (8, 16)
    assert layout.lengths(0).tolist() == [[5, 3], [8, 0]]
    assert layout.lengths(1).tolist() == [[8, 0], [4, 4]]  # the last: 4 of the third tensor, 4 padding
    assert compressed_allreduce.Layout([3], parts=1, chunks=4).lengths(0).tolist() == [[3, 5], [8, 0], [8, 0], [8, 0]]


def test_one_step_is_numpys_worker_and_server_compression_with_their_errors():
    rng = np.random.default_rng(0)
    g1, g2 = rng.standard_normal((5, 3)).astype("float32"), rng.standard_normal(4).astype("float32")
    ints = tf.constant([7, 8], tf.int32)
    variables = [tf.Variable(tf.zeros(g1.shape)), tf.Variable(tf.zeros(g2.shape)), tf.Variable([0, 0])]
    compressor = onebit.OneBit(warmup_steps=1)
    state = compressor.new_state()
    warm = _step(compressor, state, [tf.constant(g1), tf.constant(g2), ints], variables)
    np.testing.assert_array_equal(warm[0], g1)  # the warm-up: exact
    out = _step(compressor, state, [tf.constant(g1), tf.constant(g2), ints], variables)
    x = np.concatenate([g1.ravel(), g2.ravel()])  # 19 elements, one rank: one chunk of 24
    worker = _numpy_compress(x, [15, 4])
    server = _numpy_compress(worker, [15, 4])
    np.testing.assert_allclose(np.concatenate([out[0].numpy().ravel(), out[1].numpy().ravel()]), server, rtol=1e-5)
    np.testing.assert_array_equal(out[2], ints)  # integers travel exactly
    worker_errors = np.concatenate([e.numpy().ravel() for e in state.memories("worker_error")])
    np.testing.assert_allclose(worker_errors, x - worker, rtol=1e-5, atol=1e-6)
    server_error = state.memories("server_error")[0].numpy()
    np.testing.assert_allclose(server_error[:19], worker - server, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(server_error[19:], 0.0)


def test_error_feedback_keeps_the_applied_sum_close_to_the_true_sum():
    rng = np.random.default_rng(1)
    compressor = onebit.OneBit(warmup_steps=0)
    state = compressor.new_state()
    v = tf.Variable(tf.zeros([64]))
    step = tf.function(lambda g: _step(compressor, state, [g], [v])[0])
    true_sum, applied_sum, gaps = np.zeros(64), np.zeros(64), {}
    for t in range(1, 201):
        g = (rng.standard_normal(64) * np.linspace(0.1, 3.0, 64)).astype("float32")
        true_sum += g
        applied_sum += step(tf.constant(g)).numpy()
        gaps[t] = np.linalg.norm(true_sum - applied_sum) / np.linalg.norm(true_sum)
    # What was not applied is the worker's and the server's residuals; they stay bounded.
    residual = state.memories("worker_error")[0].numpy() + state.memories("server_error")[0].numpy()[:64]
    np.testing.assert_allclose(true_sum - applied_sum, residual, atol=1e-3)
    assert gaps[200] < 0.1 and gaps[200] < gaps[20] / 3, gaps


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="warmup_steps must be >= 0"):
        onebit.OneBit(warmup_steps=-1)
