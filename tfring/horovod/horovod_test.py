"""tfring.horovod in one process (a job of one rank): Horovod's names, arguments and refusals."""

import inspect

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfring
import tfring.horovod.keras as hvd_keras
import tfring.horovod.tensorflow as hvd
import tfring.horovod.tensorflow.keras as hvd_tf_keras

# Horovod 0.28.1's public TensorFlow names (horovod/tensorflow/__init__.py), less the data-service ones.
HOROVOD_TF_NAMES = """init shutdown is_initialized size local_size cross_size rank local_rank cross_rank
is_homogeneous mpi_threads_supported mpi_enabled mpi_built gloo_enabled gloo_built nccl_built ddl_built ccl_built
cuda_built rocm_built start_timeline stop_timeline ProcessSet global_process_set add_process_set
remove_process_set Average Sum Adasum Min Max Product Compression allreduce grouped_allreduce allgather
grouped_allgather broadcast broadcast_variables broadcast_global_variables broadcast_object allgather_object
alltoall reducescatter grouped_reducescatter join barrier rank_op size_op local_rank_op local_size_op
DistributedOptimizer DistributedGradientTape PartialDistributedGradientTape SyncBatchNormalization broadcast_
process_set_included_op elastic""".split()
HOROVOD_KERAS_NAMES = """init shutdown is_initialized size local_size cross_size rank local_rank cross_rank
mpi_threads_supported mpi_enabled mpi_built gloo_enabled gloo_built nccl_built ddl_built ccl_built cuda_built
rocm_built ProcessSet global_process_set add_process_set remove_process_set Average Sum Compression
DistributedOptimizer broadcast_global_variables allreduce allgather broadcast reducescatter load_model
callbacks elastic""".split()
CALLBACKS = ["BroadcastGlobalVariablesCallback", "MetricAverageCallback", "LearningRateScheduleCallback",
             "LearningRateWarmupCallback", "BestModelCheckpoint"]


ELASTIC_TF_NAMES = ["TensorFlowKerasState", "TensorFlowState", "ObjectState", "run"]
ELASTIC_KERAS_NAMES = ["KerasState", "CommitStateCallback", "UpdateBatchStateCallback", "UpdateEpochStateCallback",
                       "run"]


def test_every_horovod_name_is_there():
    assert [n for n in HOROVOD_TF_NAMES if not hasattr(hvd, n)] == []
    assert [n for n in ELASTIC_TF_NAMES if not hasattr(hvd.elastic, n)] == []
    assert [n for n in ELASTIC_KERAS_NAMES if not hasattr(hvd_keras.elastic, n)] == []
    for module in (hvd_tf_keras, hvd_keras):
        assert [n for n in HOROVOD_KERAS_NAMES if not hasattr(module, n)] == []
        assert [n for n in CALLBACKS if not hasattr(module.callbacks, n)] == []


def test_queries_answer_truthfully():
    hvd.init()
    assert (hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size(), hvd.cross_rank(), hvd.cross_size()) == \
           (0, 1, 0, 1, 0, 1)
    assert hvd.is_initialized() and not hvd.mpi_built() and not hvd.gloo_built() and not hvd.mpi_threads_supported()
    assert int(hvd.rank_op()) == 0 and int(hvd.size_op()) == 1
    assert (hvd.Average, hvd.Sum, hvd.Adasum, hvd.Min, hvd.Max, hvd.Product) == (0, 1, 2, 3, 4, 5)


def test_collectives_of_one_rank_in_every_type_horovod_has():
    for dtype in (tf.uint8, tf.int8, tf.uint16, tf.int16, tf.int32, tf.int64, tf.float16, tf.float32, tf.float64):
        x = tf.constant([1, 2, 3], dtype)
        op = hvd.Sum if dtype.is_integer else hvd.Average
        for out in (hvd.allreduce(x, op=op), hvd.allgather(x), hvd.broadcast(x, 0)):
            assert out.dtype == dtype
            np.testing.assert_array_equal(out, x)
    np.testing.assert_array_equal(hvd.broadcast(tf.constant([True, False]), 0), [True, False])
    np.testing.assert_allclose(hvd.allreduce(tf.constant([2.0]), prescale_factor=3.0, postscale_factor=0.5), [3.0])
    np.testing.assert_allclose(hvd.allreduce(tf.constant([1.0, 2.0]), compression=hvd.Compression.fp16), [1, 2])
    slices = tf.IndexedSlices(tf.constant([[1.0, 2.0]]), tf.constant([3]), tf.constant([5, 2]))
    out = hvd.allreduce(slices)
    assert isinstance(out, tf.IndexedSlices)
    np.testing.assert_array_equal(tf.convert_to_tensor(out), tf.convert_to_tensor(slices))
    narrow = tf.Variable(tf.constant([-3, 4], tf.int8))
    hvd.broadcast_variables([narrow, tf.Variable([1.0])], root_rank=0)
    np.testing.assert_array_equal(narrow.numpy(), [-3, 4])
    for dtype in (tf.uint8, tf.int8, tf.int32, tf.float16, tf.float64):
        rows = tf.cast(tf.reshape(tf.range(6), [3, 2]), dtype)
        np.testing.assert_array_equal(hvd.reducescatter(rows, op=hvd.Sum), rows)
        received, counts = hvd.alltoall(rows, splits=[3])
        np.testing.assert_array_equal(received, rows)
        assert received.dtype == dtype and counts.numpy().tolist() == [3]
    np.testing.assert_array_equal(hvd.alltoall(tf.constant([True, False])), [True, False])
    v = tf.Variable([1.5, 2.5])
    np.testing.assert_array_equal(hvd.broadcast_([v], root_rank=0)[0], [1.5, 2.5])
    assert hvd.broadcast_object({"a": [1, 2], 0: (3, b"x")}) == {"a": [1, 2], 0: (3, b"x")}
    assert hvd.allgather_object({1, 2}) == [{1, 2}]
    assert hvd.allgather_object(3) == [3]


@pytest.mark.parametrize("dtype", [tf.uint8, tf.int8, tf.int32, tf.int64, tf.float16, tf.float32])
def test_scale_factors_are_horovods_arithmetic(dtype):
    # Horovod scales integers in float64 and truncates back (a cast, not a rounding), and float16
    # in float32: its own tests compare bit for bit.
    values = tf.constant([[-3, 7, 1], [5, -1, 2]] if dtype != tf.uint8 else [[3, 7, 1], [5, 1, 2]])
    x = tf.cast(values, dtype)
    factor = 0.71
    wide = tf.float64 if dtype.is_integer else tf.float32 if dtype == tf.float16 else dtype
    expected = tf.cast(tf.cast(x, wide) * tf.constant(factor, wide), dtype)
    for out in (hvd.allreduce(x, op=hvd.Sum, prescale_factor=factor),
                hvd.allreduce(x, op=hvd.Sum, postscale_factor=factor)):
        assert out.dtype == dtype
        np.testing.assert_array_equal(out, expected)


def test_gradients_follow_horovods_conventions():
    x = tf.Variable([1.0, -2.0])
    with tf.GradientTape(persistent=True) as tape:
        a = tf.reduce_sum(hvd.allreduce(x * x))
        b = tf.reduce_sum(hvd.allgather(x * 3.0))
        c = tf.reduce_sum(hvd.broadcast(x * 5.0, 0))
    np.testing.assert_allclose(tape.gradient(a, x), [2.0, -4.0])
    np.testing.assert_allclose(tape.gradient(b, x), [3.0, 3.0])
    np.testing.assert_allclose(tape.gradient(c, x), [5.0, 5.0])


@pytest.mark.parametrize("call,error,needle", [
    (lambda: hvd.DistributedOptimizer(keras.optimizers.SGD(), op=hvd.Adasum, average_aggregated_gradients=True),
     ValueError, "Adasum does not support average_aggregated_gradients"),
    (lambda: hvd.DistributedOptimizer(keras.optimizers.SGD(), op=hvd.Adasum,
                                      compression=tfring.compression.PowerSGD(rank=1)), ValueError, "cannot compress"),
    (lambda: hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1), op=hvd.Adasum),
     NotImplementedError, "TF1"),
    (lambda: hvd_keras.DistributedOptimizer(keras.optimizers.SGD(), op=hvd.Adasum, shard_optimizer_state=True,
                                            shard_gradients=True), ValueError, "op=hvd.Adasum cannot"),
    (lambda: hvd.allreduce(tf.ones([1]), op=7), ValueError, "op must be"),
    (lambda: hvd.allreduce(tf.ones([1]), op=hvd.Sum, average=True), ValueError, "supersedes average"),
    (lambda: hvd.allreduce(tf.ones([1]), process_set=hvd.ProcessSet([0])), ValueError, "is not registered"),
    (lambda: hvd.add_process_set([0]), ValueError, "duplicate process set"),
    (lambda: hvd.ProcessSet([0.5]), ValueError, "list of process ranks"),
    (lambda: hvd.alltoall(tf.ones([1]), process_set=hvd.ProcessSet([0])), ValueError, "is not registered"),
    (lambda: hvd.init(comm=[0]), NotImplementedError, "comm"),
    (lambda: hvd.broadcast_global_variables(0), RuntimeError, "eager"),
    (lambda: hvd.DistributedOptimizer(keras.optimizers.SGD(), op=hvd.Max), ValueError, "Average, Sum and Adasum"),
    (lambda: hvd.DistributedOptimizer(keras.optimizers.SGD(), backward_passes_per_step=0), ValueError,
     "backward_passes_per_step"),
    (lambda: hvd.DistributedOptimizer(keras.optimizers.SGD(), compression="fp16"), TypeError, "compression"),
    (lambda: hvd.broadcast_object(lambda: 0), ValueError, "cannot be sent as pickle"),
    (lambda: tfring.broadcast_object({1: 2}), ValueError, "string keys"),
    (lambda: hvd.DistributedOptimizer(keras.optimizers.SGD(), op=hvd.Sum, gradient_predivide_factor=2.0),
     ValueError, "predivide"),
    (lambda: hvd.DistributedOptimizer(object()), TypeError, "Keras 3 optimizers"),
])
def test_what_tfring_lacks_or_refuses_is_named(call, error, needle):
    with pytest.raises(error, match=needle):
        call()


def test_adasum_of_one_rank_is_its_tensor():
    x = tf.constant([1.5, -2.0, 0.25])
    np.testing.assert_array_equal(hvd.allreduce(x, op=hvd.Adasum), x)
    np.testing.assert_array_equal(hvd.allreduce(x, op=hvd.Adasum, postscale_factor=2.0), 2 * x)


def test_join_of_one_rank_returns_it_at_once():
    assert int(hvd.join()) == 0


def test_the_distributed_optimizer_is_the_users_class_with_its_configuration():
    sgd = keras.optimizers.SGD(0.25, momentum=0.5, nesterov=True)
    opt = hvd.DistributedOptimizer(sgd)
    assert isinstance(opt, keras.optimizers.SGD) and type(opt).__name__ == "SGD"
    assert opt.get_config() == sgd.get_config() and type(sgd) is keras.optimizers.SGD
    copy = opt.from_config(opt.get_config())
    assert copy.get_config() == opt.get_config() and hasattr(copy, "register_local_var")
    # Each module's argument order is Horovod's own.
    assert list(inspect.signature(hvd_tf_keras.DistributedOptimizer).parameters)[:9] == [
        "optimizer", "name", "device_dense", "device_sparse", "compression", "sparse_as_dense",
        "gradient_predivide_factor", "op", "backward_passes_per_step"]
    assert list(inspect.signature(hvd.DistributedOptimizer).parameters)[:9] == [
        "optimizer", "name", "use_locking", "device_dense", "device_sparse", "compression", "sparse_as_dense",
        "backward_passes_per_step", "op"]
    # horovod.keras' PartialDistributedOptimizer: the local layers' weights keep their own gradients.
    model = keras.Sequential([keras.Input([2]), keras.layers.Dense(3), keras.layers.Dense(1)])
    partial = hvd_keras.PartialDistributedOptimizer(sgd, local_layers=model.layers[-1])
    assert list(inspect.signature(hvd_keras.PartialDistributedOptimizer).parameters)[-2:] == [
        "local_layers", "scale_local_gradients"]
    assert {id(w) for w in model.layers[-1].trainable_weights} <= partial._hvd["local"]
    with pytest.raises(ValueError, match="keras.layers.Layer"):
        hvd_keras.PartialDistributedOptimizer(sgd, local_layers=["dense"])


def test_under_mixed_float16_the_loss_scale_sits_inside_the_distributed_optimizer():
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        opt = hvd_tf_keras.DistributedOptimizer(keras.optimizers.SGD(0.1))
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        model.compile(optimizer=opt, loss="mse")
        assert model.optimizer is opt and isinstance(opt, keras.optimizers.LossScaleOptimizer)
    finally:
        keras.mixed_precision.set_global_policy("float32")


def _train(opt, steps, batches):
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(1)])
    model.compile(optimizer=opt, loss="mse")
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((steps * batches, 4)), rng.standard_normal((steps * batches, 1))
    model.fit(x, y, batch_size=batches, epochs=1, shuffle=False, verbose=0)
    return model, np.concatenate([w.numpy().ravel() for w in model.weights])


def test_one_rank_trains_as_keras_and_accumulation_is_horovods():
    _, plain = _train(keras.optimizers.SGD(0.1, momentum=0.9), 8, 4)
    _, wrapped = _train(hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.9)), 8, 4)
    np.testing.assert_array_equal(wrapped, plain)
    # Two passes of 4 rows, averaged, then one step: one Keras step on 8 rows.
    _, eight = _train(keras.optimizers.SGD(0.1, momentum=0.9), 4, 8)
    model, two = _train(hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.9), backward_passes_per_step=2,
                                                 average_aggregated_gradients=True), 8, 4)
    np.testing.assert_allclose(two, eight, rtol=1e-6, atol=1e-7)
    assert int(model.optimizer.iterations.numpy()) == 8  # Horovod counts passes
    assert len(model.optimizer.variables) == len(keras.optimizers.SGD(0.1, momentum=0.9).variables) + \
        len(model.trainable_variables)  # the accumulators are not the optimizer's variables


def test_load_model_keeps_the_optimizer_state(tmp_path):
    model, _ = _train(hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.9)), 8, 4)
    model.save(tmp_path / "m.keras")
    loaded = hvd_tf_keras.load_model(tmp_path / "m.keras")
    assert int(loaded.optimizer.iterations.numpy()) == 8
    assert hasattr(loaded.optimizer, "register_local_var")
    for a, b in zip(model.optimizer.variables, loaded.optimizer.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_the_distributed_tape_keeps_the_recording_and_the_structure():
    v = {"a": tf.Variable([1.0, 2.0]), "b": tf.Variable(3.0)}
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(v["a"] * v["a"]) + v["b"] * 2.0
    tape = hvd.DistributedGradientTape(tape)
    assert isinstance(tape, tf.GradientTape)
    grads = tape.gradient(loss, v)
    np.testing.assert_allclose(grads["a"], [2.0, 4.0])
    np.testing.assert_allclose(grads["b"], 2.0)


def test_elastic_state_commits_restores_and_its_callbacks_count():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    state = hvd.elastic.KerasState(model, epoch=0, batch=0)
    before = [w.copy() for w in model.get_weights()]
    model.fit(np.ones((8, 2)), np.ones((8, 1)), batch_size=4, epochs=2, verbose=0,
              callbacks=[hvd.elastic.UpdateBatchStateCallback(state), hvd.elastic.UpdateEpochStateCallback(state)])
    assert (state.epoch, state.batch) == (2, 0)
    state.restore()  # nothing committed: back to the weights and values it was made with
    assert all(np.array_equal(a, b) for a, b in zip(model.get_weights(), before))
    assert (state.epoch, state.batch) == (0, 0)
    runs = []
    hvd.elastic.run(lambda s, x: runs.append((s.epoch, x)))(state, 7)
    assert runs == [(0, 7)]
    with pytest.raises(ValueError, match="built"):
        hvd.elastic.KerasState(keras.Sequential([keras.layers.Dense(1)]))


def test_a_tf1_optimizer_is_wrapped_as_horovod_wraps_it():
    with tf.Graph().as_default():
        v = tf.compat.v1.Variable([1.0, 2.0], use_resource=True)
        opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5))
        assert type(opt._optimizer).__name__ == "GradientDescentOptimizer"
        train = opt.minimize(tf.reduce_sum(v * v))
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(train)
            np.testing.assert_allclose(session.run(v), [0.0, 0.0])  # v - 0.5 * 2v
    with pytest.raises(NotImplementedError, match="backward_passes_per_step"):
        hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5), backward_passes_per_step=2)
