"""tfrecord_dataset across ranks (with RingStrategy), and s3:// paths through tensorflow-io."""

import json
import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from tfring.launch.addresses import free_port
from tfring_dev.testing import QUIET_ENV
from tfring_dev.testing import rank_lines

pytestmark = pytest.mark.multiprocess

RANKS = r'''
import json, os
import numpy as np
import tensorflow as tf
import keras
import tfring

tf.config.threading.set_intra_op_parallelism_threads(1)
strategy = tfring.RingStrategy()
prefix = os.environ["PREFIX"]
ds = tfring.data.tfrecord_dataset(prefix, 4, shuffle=True, seed=strategy.rank)  # the global batch
ids = [int(i) for x, _ in ds for i in x["ident"].numpy()]
print("IDS", json.dumps(ids))
print("ROWS", sorted({int(x["ident"].shape[0]) for x, _ in ds}))
try:
    tfring.data.tfrecord_dataset(prefix, 3)
except ValueError as e:
    print("ODD", e)
with strategy.scope():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
train = tfring.data.tfrecord_dataset(prefix, 4, map_fn=lambda x, y: (x["small"], tf.cast(y, tf.float32)))
hist = model.fit(train, epochs=2, verbose=0)
steps = sum(1 for _ in strategy.experimental_distribute_dataset(train))
w = np.concatenate([v.numpy().ravel() for v in model.weights])
g = tfring.ops.allgather(tf.reshape(w, [1, -1])).numpy()
print("FIT", steps, bool(np.all(g == g[0])), bool(np.isfinite(hist.history["loss"][-1])))
'''


def _convert(tmp_path, shards):
    from tfring.data import write_tfrecords

    rng = np.random.default_rng(0)
    ident = np.arange(20, dtype="int64")
    np.savez(tmp_path / "d.npz", ident=ident, small=rng.standard_normal((20, 3)).astype("float32"),
             label=(ident % 2).astype("int64"))
    prefix = str(tmp_path / f"s{shards}" / "d")
    write_tfrecords(str(tmp_path / "d.npz"), prefix, num_shards=shards, progress=False)
    return prefix


@pytest.mark.parametrize("shards", [3, 1])
def test_ranks_read_disjoint_equal_parts(warm, tmp_path, shards):
    prefix = _convert(tmp_path, shards)
    proc = warm.run_job(2, RANKS, env={"PREFIX": prefix}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ids, fits = [], []
    for r in range(2):
        lines = rank_lines(proc.stdout, r)
        ids.append(json.loads(next(l for l in lines if l.startswith("IDS"))[4:]))
        fits.append(next(l for l in lines if l.startswith("FIT")))
        # batch_size is the global batch, as in model.fit and dataset.batch: 4 over 2 ranks is 2 each.
        assert "ROWS [2]" in lines
        odd = next(l for l in lines if l.startswith("ODD"))
        assert "global batch (3), which must divide evenly among the 2 ranks" in odd
    assert not set(ids[0]) & set(ids[1])
    assert len(ids[0]) == len(ids[1])
    if shards == 3:
        # 20 records in shards of 7, 7, 6: rank 0 reads files 0 and 2 (13), rank 1 file 1 (7): both take 7.
        assert len(ids[0]) == 6 and set(ids[1]) <= set(range(7, 14))  # 7 records -> 3 whole batches of 2
    else:
        assert len(ids[0]) == 10  # every 2nd record
    for line in fits:
        steps, same, finite = line.split()[1:]
        assert same == "True" and finite == "True"
        assert int(steps) == len(ids[0]) // 2  # RingStrategy did not shard the batches again



S3_CONVERT_AND_READ = r'''
import os, sys
import numpy as np
import boto3
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
from tfring.data import tfrecord_dataset, write_tfrecords
s3 = boto3.client("s3", endpoint_url=os.environ["S3_ENDPOINT"], region_name="us-east-1")
if "tfring-test" not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
    s3.create_bucket(Bucket="tfring-test")
np.save(sys.argv[1], np.arange(24, dtype="int64").reshape(12, 2))
prefix = "s3://tfring-test/data/v" + os.environ.get("PREFIX_SUFFIX", "")
write_tfrecords(sys.argv[1], prefix, num_shards=3, progress=False)
x = np.concatenate([b.numpy() for b in tfrecord_dataset(prefix, 4, shuffle=False)])
print("READ", sorted(x[:, 0].tolist()))
if len(sys.argv) > 2:
    sys.exit(int(sys.argv[2]))
'''


def test_s3_paths_fail_clearly_where_tensorflow_io_does_not_load():
    import tensorflow as tf

    major, minor = (int(p) for p in tf.__version__.split(".")[:2])
    if (major, minor) < (2, 18):
        pytest.skip("tensorflow-io loads on this TensorFlow: test_s3_paths_through_tensorflow_io runs instead")
    from tfring.data import tfrecord_dataset

    with pytest.raises(RuntimeError, match="need tensorflow-io, which is unavailable on TensorFlow"):
        tfrecord_dataset("s3://bucket/data/train", 4)


@pytest.mark.tensorflow_io
def test_s3_paths_through_tensorflow_io(tmp_path):
    pytest.importorskip("moto", reason="moto (in requirements/tf2.17.txt) provides the local S3 emulator")
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        script = tmp_path / "s3.py"
        script.write_text(S3_CONVERT_AND_READ)
        env = dict(os.environ, **QUIET_ENV, AWS_ACCESS_KEY_ID="test", AWS_SECRET_ACCESS_KEY="test",
                   AWS_REGION="us-east-1", S3_ENDPOINT=f"http://127.0.0.1:{port}", S3_USE_HTTPS="0",
                   S3_VERIFY_SSL="0")
        proc = subprocess.run([sys.executable, str(script), str(tmp_path / "v.npy")], capture_output=True,
                              text=True, env=env, timeout=300)
        # Exit status 0: tensorflow-io 0.37.1's S3 plugin would abort at exit (134) without tfring's guard.
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "READ " + str(list(range(0, 24, 2))) in proc.stdout
        (tmp_path / "v.npy").unlink()
        failing = subprocess.run([sys.executable, str(script), str(tmp_path / "w.npy"), "3"], capture_output=True,
                                 text=True, env=dict(env, PREFIX_SUFFIX="2"), timeout=300)
        assert failing.returncode == 3, failing.stderr[-3000:]  # the script's own status survives the guard
    finally:
        server.terminate()
        server.wait(timeout=30)


SKIPPING = r'''
import os
import tensorflow as tf
import keras
import tfring

tf.config.threading.set_intra_op_parallelism_threads(1)
strategy = tfring.RingStrategy()
train = tfring.data.tfrecord_dataset(os.environ["PREFIX"], 4, skip_corrupt=True, shuffle=False,
                                     map_fn=lambda x, y: (x, tf.cast(y, tf.float32)))
with strategy.scope():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
model.fit(train, epochs=2, verbose=0)
print("STEPS", sum(1 for _ in train))
'''


def test_skip_corrupt_keeps_the_ranks_in_step(warm, tmp_path):
    # Rank 1 reads shards 1 and 3; a damaged record in shard 1 drops the rest of that file there.
    # Both ranks must still run the same number of steps (the smallest), and the log says who skipped.
    from tfring.data import write_tfrecords

    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", small=rng.standard_normal((40, 3)).astype("float32"),
             label=np.arange(40, dtype="int64") % 2)
    prefix = str(tmp_path / "d")
    write_tfrecords(str(tmp_path / "d.npz"), prefix, num_shards=4, progress=False)
    shard = tmp_path / "d-00001-of-00004.tfrecord"
    data = bytearray(shard.read_bytes())
    data[len(data) // 3] ^= 0xFF
    shard.write_bytes(bytes(data))
    proc = warm.run_job(2, SKIPPING, env={"PREFIX": prefix}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    steps = [next(l for l in rank_lines(proc.stdout, r) if l.startswith("STEPS")) for r in range(2)]
    assert steps[0] == steps[1] and int(steps[0].split()[1]) < 10, steps
    assert "records skipped as corrupt, by rank: [0, " in proc.stderr, proc.stderr[-3000:]
