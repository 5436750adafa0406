"""The ops in one process (a job of one rank: every collective is an identity) and their errors."""

import numpy as np
import pytest
import tensorflow as tf

import tfring
from tfring.ops import collectives
from tfring.ops import started


def test_identity_eager_and_in_function():
    x = [tf.constant([1.5, 2.0]), tf.constant([[3.0]])]
    for op in collectives.REDUCE_OPS:
        out = tfring.ops.allreduce(x, op=op)
        np.testing.assert_array_equal(out[0], x[0])
        np.testing.assert_array_equal(out[1], x[1])
    fn = tf.function(lambda t: tfring.ops.allreduce(t, op="mean"))
    np.testing.assert_array_equal(fn(tf.constant([4, 6])), [4, 6])
    np.testing.assert_array_equal(tfring.ops.broadcast(tf.constant([True, False])), [True, False])
    np.testing.assert_array_equal(tfring.ops.allgather(tf.ones([2, 3])), tf.ones([2, 3]))
    tfring.ops.barrier()
    assert (tfring.rank(), tfring.size(), tfring.local_rank(), tfring.local_size()) == (0, 1, 0, 1)


def test_mixed_dtypes_in_one_call_keep_their_order():
    out = tfring.ops.allreduce([tf.constant([1], tf.int64), tf.constant([2.0]), tf.constant([3], tf.int32)])
    assert [o.dtype for o in out] == [tf.int64, tf.float32, tf.int32]


def test_gradients():
    x = tf.Variable([1.0, -2.0])
    with tf.GradientTape(persistent=True) as tape:
        a = tf.reduce_sum(tfring.ops.allreduce(x * x, op="mean"))
        b = tf.reduce_sum(tfring.ops.allgather(tf.reshape(x, [1, 2]) * 3.0))
        c = tf.reduce_sum(tfring.ops.broadcast(x * 5.0))
    np.testing.assert_allclose(tape.gradient(a, x), [2.0, -4.0])
    np.testing.assert_allclose(tape.gradient(b, x), [3.0, 3.0])
    np.testing.assert_allclose(tape.gradient(c, x), [5.0, 5.0])


def test_collectives_in_a_function_are_chained_in_program_order():
    @tf.function
    def f(a, b):
        return tfring.ops.allreduce(a), tfring.ops.allreduce(b), tfring.ops.allgather(a)

    graph = f.get_concrete_function(tf.TensorSpec([2]), tf.TensorSpec([2])).graph
    ops = [op for op in graph.get_operations() if op.type.startswith("Tfring")]
    assert len(ops) == 3
    assert ops[0] in ops[1].control_inputs
    assert ops[1] in ops[2].control_inputs


def test_a_list_collective_in_a_function_hands_its_results_on_through_one_relay():
    # The relay (relay_kernel.cc) lets TensorFlow run the consumers inline: values and gradients
    # pass through it unchanged, and a single result needs none.
    x = tf.Variable([1.0, -2.0])

    @tf.function
    def f():
        with tf.GradientTape() as tape:
            reduced = tfring.ops.allreduce([x * 2.0, x * x, x], op="mean")
            loss = tf.reduce_sum(reduced[0]) + tf.reduce_sum(reduced[1]) + tf.reduce_sum(reduced[2])
        in_turn = started.allreduce_start([x, x * 3.0]).wait()
        return reduced, tape.gradient(loss, x), in_turn, tfring.ops.broadcast([x, x + 1.0]), tfring.ops.allreduce(x)

    reduced, grad, in_turn, broadcast, single = f()
    np.testing.assert_array_equal(reduced[1], [1.0, 4.0])
    np.testing.assert_array_equal(grad, [2.0 + 2.0 * 1.0 + 1.0, 2.0 - 4.0 + 1.0])
    np.testing.assert_array_equal(in_turn[1], [3.0, -6.0])
    np.testing.assert_array_equal(broadcast[1], [2.0, -1.0])
    np.testing.assert_array_equal(single, [1.0, -2.0])
    types = [op.type for op in f.get_concrete_function().graph.get_operations()]
    # The forward list, its gradient's list, the started list, the broadcast list: four relays.
    assert types.count("TfringRelay") == 4


def test_broadcast_variables():
    v = tf.Variable([1.0, 2.0])
    tfring.ops.broadcast_variables([v])
    np.testing.assert_array_equal(v, [1.0, 2.0])


def test_unsupported_dtype_fails_when_the_op_is_built():
    with pytest.raises(TypeError, match="tensor 0 has dtype string, which is not supported"):
        tfring.ops.allreduce(tf.constant(["a"]))
    with pytest.raises(TypeError, match="tensor 1 has dtype complex64"):
        tfring.ops.allreduce([tf.constant([1.0]), tf.constant([1j], tf.complex64)])


def test_bad_arguments():
    with pytest.raises(ValueError, match="op must be one of"):
        tfring.ops.allreduce(tf.constant([1.0]), op="average")
    with pytest.raises(ValueError, match="rank >= 1"):
        tfring.ops.allgather(tf.constant(1.0))
    with pytest.raises(ValueError, match="root_rank"):
        tfring.ops.broadcast(tf.constant(1.0), root_rank=-1)
    with pytest.raises(tf.errors.InvalidArgumentError, match="root_rank 3 is not a rank"):
        tfring.ops.broadcast(tf.constant(1.0), root_rank=3)
    with pytest.raises(ValueError, match="op must be one of"):
        tfring.ops.reducescatter(tf.constant([1.0, 2.0]), op="adasum")
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"floating-point tensors .* not int32"):
        tfring.ops.allreduce(tf.constant([1, 2]), op="adasum")


def test_adasum_of_one_rank_is_its_tensor_and_has_no_gradient():
    x = tf.Variable([1.5, -2.0])
    with tf.GradientTape() as tape:
        y = tfring.ops.allreduce(x * 1.0, op="adasum")
    np.testing.assert_array_equal(y, [1.5, -2.0])
    assert tape.gradient(y, x) is None


def test_broadcast_object_root_rank_must_be_a_rank():
    assert tfring.broadcast_object({"a": 1}, root_rank=0) == {"a": 1}
    for bad, needle in ((1, "root_rank must be < 1"), (-1, "root_rank must be >= 0"),
                        (0.0, "root_rank must be a whole number")):
        with pytest.raises(ValueError, match=needle):
            tfring.broadcast_object("x", root_rank=bad)


def test_large_tensor_roundtrip_is_exact():
    x = tf.constant(np.random.default_rng(0).standard_normal(1 << 20).astype(np.float32))
    np.testing.assert_array_equal(tfring.ops.allreduce(x).numpy(), x.numpy())
