"""What one Spark barrier task does: becomes rank `partitionId()` of the job and runs the function.

The tasks agree on rank 0's store through the barrier context (`allGather`), then each starts the
function in a fresh Python process (`tfring.launch.function_rank`), so TensorFlow's state never
outlives the job in Spark's reused Python workers. The process watches a pipe from its task and
exits when the task is gone (Spark kills the other tasks of a barrier stage when one fails).
"""

import os
import subprocess
import tempfile

from tfring.launch import addresses, function_rank, variables


def _placement(context):
    """(rank, size, local_rank, local_size, rank 0's host) from the barrier context's task list."""
    hosts = [info.address.rsplit(":", 1)[0] for info in context.getTaskInfos()]
    rank = context.partitionId()
    return rank, len(hosts), hosts[:rank].count(hosts[rank]), hosts.count(hosts[rank]), hosts[0]


def _gpu_env(context):
    """CUDA_VISIBLE_DEVICES for the GPUs Spark assigned this task (as HorovodRunner did), if any."""
    gpus = context.resources().get("gpu")
    return {"CUDA_VISIBLE_DEVICES": ",".join(gpus.addresses)} if gpus is not None else {}


def _run_rank(directory, env, timeout):
    """Runs the rank's process with a pipe it watches; returns its exit code."""
    read_fd, write_fd = os.pipe()
    env = dict(env, **{variables.LAUNCHER_FD: str(read_fd)})
    try:
        proc = subprocess.Popen(function_rank.command(directory), env=env,
                                pass_fds=(read_fd,))
    finally:
        os.close(read_fd)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise TimeoutError(f"tfring.spark.run: the function did not finish within {timeout} s") from None
    finally:
        os.close(write_fd)


def _outcome(directory, rank, size, code):
    """The pickled return value, or raises with the rank's traceback (this fails the Spark stage)."""
    error = function_rank.error_path(directory, rank)
    if os.path.exists(error):
        import pickle

        with open(error, "rb") as f:
            _, text = pickle.load(f)
        raise RuntimeError(f"tfring.spark.run: rank {rank} of {size} failed:\n{text}")
    result = function_rank.result_path(directory, rank)
    if code != 0 or not os.path.exists(result):
        raise RuntimeError(f"tfring.spark.run: rank {rank} of {size} exited with code {code} without a result")
    with open(result, "rb") as f:
        return f.read()


def make_task(call_bytes, secret, env, timeout):
    """The function Spark runs for each partition of the barrier stage.

    Args:
        call_bytes: the cloudpickled (fn, args, kwargs).
        secret: the job secret the driver made.
        env: extra environment variables for the ranks.
        timeout: seconds a rank may run (None: no limit).

    Returns:
        A function of a partition iterator yielding one (rank, pickled return value).
    """

    def task(_):
        from pyspark import BarrierTaskContext, SparkFiles

        context = BarrierTaskContext.get()
        rank, size, local_rank, local_size, rank0_host = _placement(context)
        offer = f"{rank0_host}:{addresses.free_port('')}" if rank == 0 else ""
        store = context.allGather(offer)[0]  # also the barrier: every task is there
        # Under Spark's own scratch directory: removed with the executor even when Spark kills this
        # task (a failed barrier stage) before the `with` can clean up.
        with tempfile.TemporaryDirectory(prefix="tfring-spark-", dir=SparkFiles.getRootDirectory()) as directory:
            with open(function_rank.call_path(directory), "wb") as f:
                f.write(call_bytes)
            rank_env = dict(os.environ, **_gpu_env(context), **env, **{
                variables.RANK: str(rank), variables.SIZE: str(size), variables.LOCAL_RANK: str(local_rank),
                variables.LOCAL_SIZE: str(local_size), variables.STORE_ADDR: store, variables.SECRET: secret,
                variables.JOB_ID: f"spark-{context.stageId()}-{store.replace(':', '-')}"})
            code = _run_rank(directory, rank_env, timeout)
            yield rank, _outcome(directory, rank, size, code)

    return task
