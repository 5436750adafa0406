"""The driver side of `tfring.spark.run`."""

import pickle
import secrets


def _spark_context(spark_context):
    if spark_context is not None:
        return spark_context
    try:
        from pyspark import SparkContext
    except ImportError:
        raise ImportError("tfring.spark.run needs PySpark: pip install pyspark (and a Java runtime)") from None
    context = SparkContext._active_spark_context
    if context is None:
        raise RuntimeError("tfring.spark.run: no active SparkContext; start a SparkSession first "
                           "(SparkSession.builder.getOrCreate()) or pass spark_context=")
    return context


def _slots(context):
    """Tasks the cluster runs at once: its cores divided by the cores each task takes."""
    return max(1, context.defaultParallelism // int(context.getConf().get("spark.task.cpus", "1")))


def _check_slots(context, num_proc):
    dynamic = context.getConf().get("spark.dynamicAllocation.enabled", "false").lower() == "true"
    if not dynamic and num_proc > _slots(context):
        raise ValueError(f"tfring.spark.run: num_proc={num_proc} but this Spark cluster has "
                         f"{_slots(context)} task slots; a barrier stage needs a slot for every "
                         "rank at once (lower num_proc or add executors)")


def _pickle_call(fn, args, kwargs):
    try:
        import cloudpickle
    except ImportError:
        from pyspark import cloudpickle  # PySpark's own copy
    return cloudpickle.dumps((fn, tuple(args), dict(kwargs or {})))


def run(fn, num_proc=None, args=(), kwargs=None, env=None, timeout=None, spark_context=None):
    """Runs `fn(*args, **kwargs)` as a tfring job of `num_proc` ranks in one Spark barrier stage.

    Each barrier task becomes a rank: rank 0's address and a fresh job secret made here reach every
    task through Spark (the barrier context's `allGather`), and each task runs `fn` in a fresh Python
    process with the variables `tfring run` would set, so `tfring.RingStrategy()` inside `fn`
    finds the job; the GPUs Spark gave a task (`spark.task.resource.gpu.amount`) are its rank's
    `CUDA_VISIBLE_DEVICES`. When a rank raises, its task fails with the rank's traceback, which fails the
    stage (Spark stops the other tasks; their ranks exit with them).

    Args:
        fn: the training function; it and its arguments are pickled with cloudpickle.
        num_proc: the number of ranks; default: the cluster's task slots (default parallelism
            divided by `spark.task.cpus`).
        args: the positional arguments `fn` is called with on every rank.
        kwargs: its keyword arguments (a dict), the same on every rank.
        env: extra environment variables for the ranks (e.g. `{"TF_NUM_INTRAOP_THREADS": "4"}`).
        timeout: seconds a rank may run; None: no limit beyond tfring's own collective timeouts.
        spark_context: a `SparkContext`; default: the active one.

    Returns:
        What `fn` returned on rank 0.

    Raises:
        ValueError: `num_proc` is not a positive number, or more than the cluster's task slots.
        ImportError: PySpark is not installed.
        Exception: Spark's error for the failed stage; its text holds the failing rank's traceback.

    Example:

    >>> import tfring.spark
    >>> from pyspark.sql import SparkSession
    >>> spark = SparkSession.builder.master("local[2]").getOrCreate()
    >>> def train(epochs):
    ...     import tfring
    ...     return f"rank {tfring.rank()} of {tfring.size()} trained {epochs} epochs"
    >>> tfring.spark.run(train, num_proc=2, args=(3,))
    'rank 0 of 2 trained 3 epochs'
    """
    from tfring.spark.barrier_task import make_task

    context = _spark_context(spark_context)
    num_proc = _slots(context) if num_proc is None else num_proc
    if isinstance(num_proc, bool) or not isinstance(num_proc, int) or num_proc < 1:
        raise ValueError(f"tfring.spark.run: num_proc must be a positive int, got {num_proc!r}")
    _check_slots(context, num_proc)
    call = _pickle_call(fn, args, kwargs)
    task = make_task(call, secrets.token_hex(32), dict(env or {}), timeout)
    results = dict(context.parallelize(range(num_proc), num_proc).barrier().mapPartitions(task).collect())
    return pickle.loads(results[0])
