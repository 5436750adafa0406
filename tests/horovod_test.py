"""Horovod scripts on tfring.horovod: a Keras script with only its import line changed trains as
one process does on N times the per-rank batch, with the ranks bit-identical; a
`DistributedGradientTape` loop likewise; the callbacks act as Horovod's.
"""

import json

import numpy as np
import pytest

from tfring_dev.testing import assert_ranks_equal_one_process
from tfring_dev.testing import rank_lines

pytestmark = pytest.mark.multiprocess

# Written as a Horovod user writes it (Horovod's tensorflow2_keras_mnist.py pattern): each rank
# fits its own rows with the per-rank batch; one process fits every row with N x that batch.
KERAS = r'''
import json, os
import numpy as np
import tensorflow as tf
import keras
import tfring.horovod.tensorflow.keras as hvd

hvd.init()
out, case = os.environ["OUT"], os.environ["CASE"]
N, B = int(os.environ["N"]), 8          # the job the one-process run stands for; the per-rank batch
rng = np.random.default_rng(0)
x = rng.standard_normal((N * B * 6, 10)).astype("float32")
y = (x[:, :3].sum(1) > 0).astype("int32") + (x[:, 3] > 0.5).astype("int32")
if hvd.size() > 1:  # rank r's rows of every global batch of N x B rows
    x, y = (a.reshape(6, N, B, *a.shape[1:])[:, hvd.rank()].reshape(6 * B, *a.shape[1:]) for a in (x, y))
batch = B if hvd.size() > 1 else N * B
passes = 2 if case == "accumulate" else 1
if passes > 1 and hvd.size() == 1:
    batch *= passes

keras.utils.set_random_seed(1 + 100 * hvd.rank())  # other weights on rank 1: the broadcast gives it rank 0's
model = keras.Sequential([keras.Input((10,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(3)])
opt = keras.optimizers.Adam(0.01) if case == "adam" else keras.optimizers.SGD(0.05, momentum=0.9)
if hvd.size() > 1:
    opt = hvd.DistributedOptimizer(opt, backward_passes_per_step=passes, average_aggregated_gradients=True,
                                   compression=hvd.Compression.fp16 if case == "fp16" else hvd.Compression.none)
model.compile(optimizer=opt, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=["accuracy"])
callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0), hvd.callbacks.MetricAverageCallback()]
history = model.fit(x, y, batch_size=batch, epochs=2, shuffle=False, callbacks=callbacks,
                    verbose=1 if hvd.rank() == 0 else 0)
np.save(f"{out}/{case}-{hvd.rank()}of{hvd.size()}.npy", np.concatenate([w.numpy().ravel() for w in model.weights]))
print("LOGS", json.dumps({k: [float(v) for v in vs] for k, vs in history.history.items()}))
print("ITERATIONS", int(model.optimizer.iterations.numpy()))
'''


def _alone_and_job(warm, script, out, name, case_env=None, tol=1e-5):
    """Runs `script` alone and as 2 ranks (tfring_dev.testing's checks: finite, ranks bit-identical,
    within `tol` of one process); returns the largest difference and the job."""
    env = {"OUT": str(out), **(case_env or {})}
    job, = warm.run_alone_then_jobs(script, env=env, pool="horovod")
    assert_ranks_equal_one_process(out, name, 2, tol=tol)
    return np.max(np.abs(np.load(out / f"{name}-0of2.npy") - np.load(out / f"{name}-0of1.npy"))), job


@pytest.mark.parametrize("case", ["sgd", "adam", "accumulate"])
def test_a_horovod_keras_script_equals_one_process_on_n_times_the_batch(warm, tmp_path, case):
    _, job = _alone_and_job(warm, KERAS, tmp_path, case, {"CASE": case, "N": "2"})
    logs = [json.loads(rank_lines(job.stdout, r)[-2].split(" ", 1)[1]) for r in range(2)]
    assert logs[0] == logs[1], "MetricAverageCallback left the ranks' logs different"
    assert rank_lines(job.stdout, 0)[-1] == "ITERATIONS 12"  # 6 passes x 2 epochs: Horovod counts passes


def test_fp16_compression_keeps_the_ranks_identical_and_close(warm, tmp_path):
    difference, _ = _alone_and_job(warm, KERAS, tmp_path, "fp16", {"CASE": "fp16", "N": "2"}, tol=1e-2)
    assert difference > 0  # approximate: float16 on the wire


TAPE = r'''
import os
import numpy as np
import tensorflow as tf
import keras
import tfring.horovod.tensorflow as hvd

hvd.init()
out, N, B = os.environ["OUT"], 2, 8
rng = np.random.default_rng(0)
x = rng.standard_normal((N * B * 4, 5)).astype("float32")
y = rng.standard_normal((N * B * 4, 1)).astype("float32")
if hvd.size() > 1:
    x, y = (a.reshape(4, N, B, -1)[:, hvd.rank()].reshape(4 * B, -1) for a in (x, y))
batch = B if hvd.size() > 1 else N * B
keras.utils.set_random_seed(7)
model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(4, activation="tanh"), keras.layers.Dense(1)])
opt = keras.optimizers.SGD(0.1)
loss_fn = keras.losses.MeanSquaredError()


@tf.function
def step(xb, yb, first):
    with tf.GradientTape() as tape:
        loss = loss_fn(yb, model(xb, training=True))
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    if first:  # Horovod's pattern: broadcast after the first step, once the optimizer has its variables
        hvd.broadcast_variables(model.variables, root_rank=0)
        hvd.broadcast_variables(opt.variables, root_rank=0)
    return loss


for i in range(len(x) // batch):
    step(x[i * batch:(i + 1) * batch], y[i * batch:(i + 1) * batch], i == 0)
np.save(f"{out}/tape-{hvd.rank()}of{hvd.size()}.npy", np.concatenate([w.numpy().ravel() for w in model.weights]))
'''


def test_a_distributed_gradient_tape_loop_equals_one_process(warm, tmp_path):
    _alone_and_job(warm, TAPE, tmp_path, "tape")


UNBUILT = r"""
import os
import numpy as np
import tensorflow as tf
import keras
import tfring.horovod.tensorflow.keras as hvd

hvd.init()
keras.utils.set_random_seed(1 + hvd.rank())  # each rank its own initial weights and rows
ds = tf.data.Dataset.from_tensor_slices((np.random.rand(64, 4).astype("float32"),
                                         np.random.randint(0, 3, 64))).repeat().batch(8)
# No Input: Keras makes the weights (and the optimizer its variables) in the first step.
model = keras.Sequential([keras.layers.Dense(8, activation="relu"), keras.layers.Dense(3, activation="softmax")])
model.compile(loss="sparse_categorical_crossentropy", optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(0.01)))
model.fit(ds, steps_per_epoch=3, epochs=2, verbose=0, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
np.save(f"{os.environ['OUT']}/unbuilt-{hvd.rank()}.npy",
        np.concatenate([np.ravel(v.numpy()) for v in model.weights + model.optimizer.variables]))
"""


def test_a_model_built_in_its_first_step_gets_the_roots_weights_after_it(warm, tmp_path):
    # Horovod's tensorflow2_keras_mnist.py: a Sequential without Input. Keras builds it (and the
    # optimizer) in the first step, after the callback's train-begin.
    job = warm.run_job(2, UNBUILT, env={"OUT": str(tmp_path)}, pool="horovod")
    assert job.returncode == 0, job.stderr[-3000:]
    rank0, rank1 = (np.load(tmp_path / f"unbuilt-{r}.npy") for r in range(2))
    assert np.array_equal(rank0, rank1)


JOIN = r"""
import numpy as np
import tensorflow as tf
import tfring.horovod.tensorflow as hvd

hvd.init()
rank, size = hvd.rank(), hvd.size()


@tf.function
def step(x):  # in a tf.function too: the joined ranks serve a graph's allreduces as well
    return hvd.allreduce(x, op=hvd.Sum), hvd.allreduce(x, op=hvd.Average)


for s in range(1 + rank):  # rank r has 1 + r batches: the others join early
    x = tf.fill([1000], float(10 * (rank + 1) + s))
    summed, averaged = step(x)
    want = sum(10 * (q + 1) + s for q in range(s, size))  # the ranks still running
    assert summed[0] == want and averaged[0] == np.float32(want) / np.float32(size), (s, summed[0], averaged[0], want)
    if s == 1:  # ranks 1 and 2, rank 0 has joined: an allgather is refused (Horovod's rule)
        try:
            hvd.allgather(tf.ones([2]))
            raise SystemExit("allgather ran while rank 0 had joined")
        except tf.errors.FailedPreconditionError as e:
            assert "rank 0 has joined (hvd.join)" in str(e), str(e)
            print("REFUSED", str(e).splitlines()[0][:160])
        try:
            hvd.broadcast_object({"a": 1}, root_rank=1, process_set=hvd.global_process_set)
            raise SystemExit("broadcast_object ran while rank 0 had joined")
        except tf.errors.FailedPreconditionError as e:
            assert "broadcast_object" in str(e) and "rank 0 has joined (hvd.join)" in str(e), str(e)
            print("REFUSED_OBJECT")
last = hvd.join()
print("LAST", int(last))
# After the join, every rank is back: an ordinary allreduce of all ranks.
print("AFTER", float(hvd.allreduce(tf.constant([1.0]), op=hvd.Sum)[0]))
"""


def test_join_lets_ranks_with_fewer_batches_finish_first(warm):
    job = warm.run_job(3, JOIN, pool="horovod")
    assert job.returncode == 0, job.stderr[-3000:]
    for r in range(3):
        assert rank_lines(job.stdout, r)[-2:] == ["LAST 2", "AFTER 3.0"], job.stdout[-2000:]
    for r in (1, 2):
        assert any(line.startswith("REFUSED") for line in rank_lines(job.stdout, r))
        assert "REFUSED_OBJECT" in rank_lines(job.stdout, r), job.stdout[-2000:]


WARMUP = r'''
import numpy as np
import keras
import tfring.horovod.tensorflow.keras as hvd

hvd.init()
seen = []
model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.4)), loss="mse")
record = keras.callbacks.LambdaCallback(
    on_train_batch_begin=lambda b, logs: seen.append(float(model.optimizer.learning_rate.numpy())))
model.fit(np.ones((16, 2)), np.ones((16, 1)), batch_size=4, epochs=3, verbose=0,
          callbacks=[hvd.callbacks.LearningRateWarmupCallback(initial_lr=0.4, warmup_epochs=2), record])
print("RATES", " ".join(f"{r:.6f}" for r in seen))
'''


def test_the_warmup_callback_follows_horovods_formula(warm):
    job = warm.run_job(2, WARMUP, pool="horovod")
    assert job.returncode == 0, job.stderr[-3000:]
    rates = [float(r) for r in rank_lines(job.stdout, 0)[-1].split()[1:]]
    size, steps, warmup, lr = 2, 4, 2, 0.4
    expected = [lr / size * ((e + (b + 1) / steps) * (size - 1) / warmup + 1) for e in range(warmup)
                for b in range(steps)] + [lr] * steps
    np.testing.assert_allclose(rates, expected, rtol=1e-5)


SYNC_BN = r'''
import os
import numpy as np
import keras
import tfring.horovod.tensorflow.keras as hvd
import tfring.horovod.tensorflow as hvd_tf

hvd.init()
out, N, B = os.environ["OUT"], 2, 8
rng = np.random.default_rng(0)
x = (rng.standard_normal((N * B * 4, 6)) * 3 + 1).astype("float32")
y = rng.standard_normal((N * B * 4, 1)).astype("float32")
if hvd.size() > 1:
    x, y = (a.reshape(4, N, B, -1)[:, hvd.rank()].reshape(4 * B, -1) for a in (x, y))
norm = hvd_tf.SyncBatchNormalization() if hvd.size() > 1 else keras.layers.BatchNormalization()
keras.utils.set_random_seed(5)
model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(5), norm, keras.layers.Dense(1)])
opt = keras.optimizers.SGD(0.05)
model.compile(optimizer=hvd.DistributedOptimizer(opt) if hvd.size() > 1 else opt, loss="mse")
model.fit(x, y, batch_size=B if hvd.size() > 1 else N * B, epochs=2, shuffle=False, verbose=0)
np.save(f"{out}/bn-{hvd.rank()}of{hvd.size()}.npy", np.concatenate([w.numpy().ravel() for w in model.weights]))
'''


def test_sync_batch_normalization_uses_every_ranks_rows(warm, tmp_path):
    _alone_and_job(warm, SYNC_BN, tmp_path, "bn")
