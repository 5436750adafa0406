"""tfring's op wrappers in TF1 graph mode (`tf.compat.v1` graph + Session, as Horovod's tests and
older scripts run them), on 2 ranks: every wrapper returns something to run, and running it does
what the eager call does; what cannot work in a graph says so instead of doing nothing."""

import json

import pytest

from tfring_dev.testing import rank_lines
from tfring_dev.testing import run_job

pytestmark = pytest.mark.multiprocess

SCRIPT = r'''
import json
import tensorflow as tf
import tfring

tf.compat.v1.disable_eager_execution()
rank = tfring.rank()
v = tf.compat.v1.Variable([rank + 1.0, 10.0 * (rank + 1)])
w = tf.compat.v1.Variable(rank + 5, dtype=tf.int64)
u = tf.compat.v1.Variable([rank + 7.0])
from_0 = tfring.ops.broadcast_variables([v, w], root_rank=0)
from_1 = tfring.ops.broadcast_variables([u], root_rank=1)
nothing = tfring.ops.broadcast_variables([])
barrier = tfring.ops.barrier(label="graph mode")
mean = tfring.ops.allreduce(tf.constant([1.0, 2.0]) * (rank + 1), op="mean")
gathered = tfring.ops.allgather(tf.fill([rank + 1], rank))
result = {"returned": [type(o).__name__ for o in (from_0, from_1, nothing, barrier)]}
with tf.compat.v1.Session() as session:
    session.run(tf.compat.v1.global_variables_initializer())
    session.run([from_0, from_1, nothing])
    session.run(barrier)
    result.update(v=session.run(v).tolist(), w=int(session.run(w)), u=session.run(u).tolist(),
                  mean=session.run(mean).tolist(), gathered=session.run(gathered).tolist())
    # A broadcast's gradient is zero off the root, but its allreduce runs on every rank, or the
    # next evaluation finds the ranks out of step (the graph prunes what a fetch does not need).
    x = tf.ones([3]) * (rank + 1)
    result["grads"] = [session.run(tf.gradients(tfring.ops.broadcast(x, root_rank=root), x)[0]).tolist()
                       for root in (0, 1, 0)]
    # Horovod's TF1 habit: object collectives through the session.
    result["objects"] = [tfring.broadcast_object({"a": rank}, root_rank=1),
                         tfring.allgather_object((rank,), serializer="pickle", session=session)]
try:
    tfring.broadcast_object({"a": 1})
    result["object"] = "no error"
except RuntimeError as e:
    result["object"] = str(e)
print("RESULT " + json.dumps(result))
'''


def test_wrappers_in_a_tf1_graph_return_ops_that_do_the_work():
    job = run_job(2, SCRIPT, timeout=240)
    assert job.returncode == 0, job.stderr[-3000:]
    for r in range(2):
        result = json.loads([line for line in rank_lines(job.stdout, r) if line.startswith("RESULT ")][0][7:])
        assert None.__class__.__name__ not in result["returned"], result["returned"]
        assert result["v"] == [1.0, 10.0] and result["w"] == 5, (r, result)  # rank 0's values
        assert result["u"] == [8.0], (r, result)  # rank 1's
        assert result["mean"] == [1.5, 3.0] and result["gathered"] == [0, 1, 1], (r, result)
        assert "call them eagerly, or in a TF1 graph with a session" in result["object"], result["object"]
        assert result["objects"] == [{"a": 1}, [[0], [1]]], result["objects"]
        assert result["grads"] == [[2.0] * 3 if root == r else [0.0] * 3 for root in (0, 1, 0)], result["grads"]
