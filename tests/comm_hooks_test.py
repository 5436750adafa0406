"""`RingStrategy.register_comm_hook`: how each bucket of gradients travels, as a user writes a hook."""

import pytest

from tfring_dev.testing import rank_lines

pytestmark = pytest.mark.multiprocess

SCRIPT = r'''
import numpy as np
import tensorflow as tf
import keras
import tfring
from tfring import compression as comm_hooks

tf.config.threading.set_intra_op_parallelism_threads(1)
rng = np.random.default_rng(0)
X = rng.standard_normal((128, 16)).astype("float32")
Y = X[:, :2] @ np.array([[1.0], [-2.0]], "float32")
calls = []


def halves(state, bucket):
    """Exact in binary: each rank sends half its gradients and the result is doubled on arrival."""
    calls.append((bucket.index, bucket.op))
    state["buckets"] = max(state.get("buckets", 0), bucket.index + 1)
    sent = [g / 2 for g in bucket.gradients]
    return bucket.allreduce(sent, bucket.op).then(lambda reduced: [r * 2 for r in reduced])


def weights(hook=None, state=None, bucket_bytes=0):
    strategy = tfring.RingStrategy(bucket_bytes=bucket_bytes)
    if hook is not None:
        strategy.register_comm_hook(state, hook)
    keras.utils.set_random_seed(1)
    with strategy.scope():
        m = keras.Sequential([keras.Input((16,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
        m.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9, clipnorm=0.5), loss="mse")
    m.fit(X, Y, batch_size=32, epochs=2, shuffle=False, verbose=0)
    return np.concatenate([v.numpy().ravel() for v in m.weights]), strategy


default, first = weights()
try:
    first.register_comm_hook(None, halves)
except RuntimeError as e:
    print("LATE", e)
state = {}
hooked, strategy = weights(halves, state, bucket_bytes=64)
print("EQUAL", bool(np.array_equal(default, hooked)), "BUCKETS", state["buckets"], "TRACED", len(calls) > 0,
      "OPS", sorted({op for _, op in calls}))
try:
    strategy.register_comm_hook(None, comm_hooks.allreduce_hook)
except RuntimeError as e:
    print("TWICE", e)
try:
    tfring.RingStrategy(compression="fp16").register_comm_hook(None, halves)
except RuntimeError as e:
    print("COMPRESSION", e)


def dropping(state, bucket):
    return bucket.allreduce(bucket.gradients[:1])


try:
    weights(dropping)
except Exception as e:
    print("BAD", type(e).__name__, str(e).replace("\n", " ")[:300])
'''


def test_a_users_exact_hook_trains_as_the_default_and_misuse_is_refused(warm):
    proc = warm.run_job(2, SCRIPT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for rank in range(2):
        lines = rank_lines(proc.stdout, rank)
        # The gradients entering the optimizer are each rank's own rows' mean: the hook averages them.
        assert any(l.startswith("EQUAL True BUCKETS") and "TRACED True OPS ['mean']" in l for l in lines), lines
        assert int([l for l in lines if l.startswith("EQUAL")][0].split()[3]) > 1  # several buckets travelled
        assert any(l.startswith("TWICE") and "registered already" in l for l in lines), lines
        assert any(l.startswith("LATE") and "before the first fit" in l for l in lines), lines
        assert any(l.startswith("COMPRESSION") and "cast_hook" in l for l in lines), lines
        assert any(l.startswith("BAD TypeError") and "dropping returned tensors" in l for l in lines), lines
