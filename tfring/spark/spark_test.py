"""tfring.spark.run in a real Spark (local[2]): barrier tasks become ranks, rank 0's result comes back,
a failing rank fails the stage with its traceback. `make test-spark` installs PySpark and a JRE."""

import os
import shutil
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.multiprocess]
pyspark = pytest.importorskip("pyspark", reason="PySpark is not installed (make test-spark installs it)")
if shutil.which("java") is None:
    pytest.skip("no Java runtime (make test-spark installs default-jre-headless)", allow_module_level=True)

import tfring.spark  # noqa: E402

RANK_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "2"}


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    saved = os.environ.get("PYSPARK_PYTHON")
    os.environ["PYSPARK_PYTHON"] = sys.executable  # the executors' Python: this env's, with tfring in it
    session = (SparkSession.builder.master("local[2]").appName("tfring-test")
               .config("spark.ui.enabled", "false").config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.driver.host", "127.0.0.1").getOrCreate())
    yield session
    session.stop()
    if saved is None:
        os.environ.pop("PYSPARK_PYTHON")
    else:
        os.environ["PYSPARK_PYTHON"] = saved


def _train(epochs):
    import numpy as np
    import keras
    import tensorflow as tf
    import tfring

    keras.utils.set_random_seed(1)
    x = np.random.default_rng(0).standard_normal((128, 4)).astype("float32")
    y = x @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32")
    strategy = tfring.RingStrategy()
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    history = model.fit(x, y, batch_size=32, epochs=epochs, verbose=0)
    weights = np.concatenate([w.numpy().ravel() for w in model.weights])
    every = tfring.ops.allgather(tf.constant(weights[None, :])).numpy()
    total = float(tfring.ops.allreduce(tf.constant([tfring.rank() + 1.0]), op="sum").numpy()[0])
    return {"rank": tfring.rank(), "size": tfring.size(), "sum": total, "loss": history.history["loss"][-1],
            "same_weights": bool((every == every[0]).all())}


def test_barrier_tasks_train_as_one_job_and_rank0s_result_comes_back(spark):
    result = tfring.spark.run(_train, num_proc=2, args=(3,), env=RANK_ENV, spark_context=spark.sparkContext)
    assert (result["rank"], result["size"], result["sum"], result["same_weights"]) == (0, 2, 3.0, True)
    assert result["loss"] < 5.0


def _fail_on_rank_1():
    import tfring

    tfring.init()
    if tfring.rank() == 1:
        raise ValueError("bad shard on rank one")
    import tensorflow as tf

    tfring.ops.allreduce(tf.constant([1.0]))  # waits for rank 1, which is gone


def test_a_failing_rank_fails_the_stage_with_its_traceback(spark, tmp_path):
    with pytest.raises(Exception) as info:
        tfring.spark.run(_fail_on_rank_1, num_proc=2, env=dict(RANK_ENV, TFRING_TIMEOUT="20"),
                         spark_context=spark.sparkContext)
    text = str(info.value)
    assert "rank 1 of 2 failed" in text and "bad shard on rank one" in text and "_fail_on_rank_1" in text
    leftover = subprocess.run(["pgrep", "-f", "tfring.launch.function_rank"], capture_output=True, text=True)
    assert leftover.stdout.strip() == "" or _gone_soon(), leftover.stdout
    import glob
    import tempfile

    assert not glob.glob(os.path.join(tempfile.gettempdir(), "tfring-spark-*"))  # task directories: Spark's scratch


def _gone_soon(seconds=20):
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if subprocess.run(["pgrep", "-f", "tfring.launch.function_rank"], capture_output=True).returncode != 0:
            return True
        time.sleep(0.5)
    return False


def test_more_ranks_than_slots_is_refused(spark):
    with pytest.raises(ValueError, match="num_proc=3 but this Spark cluster has 2 task slots"):
        tfring.spark.run(_train, num_proc=3, spark_context=spark.sparkContext)
    with pytest.raises(ValueError, match="positive int"):
        tfring.spark.run(_train, num_proc=0, spark_context=spark.sparkContext)
