"""`RingStrategy`: a `tf.distribute.Strategy` with one replica per process, over tfring's ring.

Keras 3's TensorFlow trainer drives a strategy through a handful of calls; this strategy answers
each of them across processes:

- `num_replicas_in_sync` is the job size; a rank's loss is what one process computes on its rows
  (Keras' own 1/size loss scaling does nothing: see `step_rows`), however the script writes it;
- gradients are averaged as they enter the optimizer, each rank weighted by its share of the step's
  rows, so they are the mean over the global batch, in buckets, through a communication hook
  (see `gradients.door` and `tfring.compression`); Keras' own gradient `all_reduce`
  (`ReplicaContext.all_reduce` -> `batch_reduce_to`) then passes them through, or reduces them
  where the door leaves it to Keras (gradient accumulation, custom loops);
- every variable created in `scope()` takes rank 0's initial value (a broadcast at creation);
  metric state variables (`synchronization=ON_READ`) are sync-on-read, so reading a metric's result
  outside the step reduces it across ranks; non-trainable float variables assigned in the step
  (batch-norm moving averages) are averaged across ranks at each assignment;
- `run()` gathers each step output from every rank (`step_outputs`), so Keras' per-replica
  reduction gives global loss and metric logs and, for `predict`, the global predictions in order;
- `experimental_distribute_dataset` gives each rank its share of every global batch (by file or
  by record: see `input.share`).
"""

import tensorflow as tf
from tensorflow.python.distribute import distribute_lib

from tfring import config
from tfring import runtime
from tfring.compression import default_hooks
from tfring.compression import registry
from tfring.compression import runner
from tfring.strategy import inter_op_threads
from tfring.strategy import shared_seed
from tfring.strategy import strategy_base
from tfring.strategy.gradients import bucket_tuning
from tfring.strategy.gradients import buckets
from tfring.strategy.gradients import reduction
from tfring.strategy.keras_wraps import install
from tfring.strategy.ring_extended import RingExtended


def replica_device(visible_gpus, local_rank):
    """The default device of a rank's replica: its GPU when there are any, else the CPU.

    Args:
        visible_gpus: how many GPUs this process sees.
        local_rank: the rank's index among the ranks on its host.

    Returns:
        A device string: "/gpu:K" with K = local_rank % visible_gpus, or "/cpu:0".
    """
    return f"/gpu:{local_rank % visible_gpus}" if visible_gpus > 0 else "/cpu:0"


class RingStrategy(tf.distribute.OneDeviceStrategy, strategy_base.RingStrategyBase):
    """Synchronous data parallelism with one replica per process, over tfring's ring allreduce.

    Build and compile the model inside `strategy.scope()`, then call `model.fit` as usual on every
    rank with the same code. `batch_size` (and `dataset.batch(B)`) is the global batch: each rank
    trains on its B / size rows, gradients are averaged over the global batch, and the printed loss
    and metrics are global. Any number of rows works: a short last batch is split as evenly as it
    can be and weighted by rows, so `fit`, `evaluate` and `predict` equal one process.

    Args:
        fusion_threshold_bytes: most bytes per fused allreduce pass (see `tfring.init`).
        compression: None (exact), "fp16" or "bf16" (gradients travel in that type and are cast
            back), "adasum" (the ranks' gradients combined by Adasum instead of averaged:
            `tfring.compression.adasum_hook`; a power-of-two number of ranks), or a compressor
            such as `tfring.compression.PowerSGD(rank=4)`: approximate,
            not equal to one process (see `tfring.compression`; `register_comm_hook` sets a hook
            of your own). Only gradients are compressed: every other reduction stays exact.
        timeout: seconds a collective may stall before it fails with `UnavailableError`.
        device: where this rank's replica runs. None (default): GPU `local_rank % visible GPUs`
            where TensorFlow sees a GPU (give each process its own GPU, e.g. with
            CUDA_VISIBLE_DEVICES, or let the local rank choose), else the CPU.
        sparse_as_dense: densify sparse gradients (an Embedding's `tf.IndexedSlices`) and
            all-reduce them. Default False: their rows are allgathered, unless so many rows are
            touched that the dense allreduce moves fewer bytes (see `gradients.sparse`).
        bucket_bytes: about how many bytes of gradients travel together: each bucket's allreduce
            starts as soon as the backward pass has produced its gradients, overlapping the rest
            of the backward pass (see `gradients.buckets`). 0: one allreduce of every gradient
            after the backward pass. `"auto"`: the first steps of `fit` try 1 to 32 MiB, one size
            after another, and keep the fastest on the slowest rank, which rank 0 prints (see
            `gradients.bucket_tuning`; each size tried retraces the train step once). None:
            `TFRING_BUCKET_BYTES`, else 4 MiB. Every rank must use the same value.
        shard_optimizer_state: keep each variable's optimizer state (momentum, Adam's moments)
            on one rank only, about 1/N of it per rank (ZeRO stage 1, see
            `tfring.strategy.sharding.optimizer_state`). The weights stay equal to the unsharded
            run's; a save still holds the whole state. Default False.
        shard_gradients: with `shard_optimizer_state=True`, each rank also receives only the
            reduced gradients of the variables it owns (ZeRO stage 2): they are reduce-scattered
            to their owners instead of all-reduced, so a step moves about the bytes of plain data
            parallelism, not 1.5 times them, and no rank holds the whole reduced gradients. Needs
            the exact default reduction (no `compression` or communication hook) and no
            `LossScaleOptimizer`. Default False.

    Example:

    >>> strategy = tfring.RingStrategy()
    >>> with strategy.scope():
    ...     model = keras.Sequential([keras.layers.Dense(1)])
    ...     model.compile(optimizer="sgd", loss="mse")
    >>> model.fit(x, y, batch_size=64, epochs=1)
    """

    def __init__(self, fusion_threshold_bytes=None, compression=None, timeout=None, device=None,
                 sparse_as_dense=False, bucket_bytes=None, shard_optimizer_state=False, shard_gradients=False):
        if shard_gradients and not shard_optimizer_state:
            raise ValueError("RingStrategy: shard_gradients=True needs shard_optimizer_state=True (each rank receives "
                             "the gradients of the variables whose optimizer state it keeps)")
        hook_state, hook = registry.for_compression(compression, "RingStrategy")
        try:
            settings = config.Config.resolve(fusion_threshold_bytes=fusion_threshold_bytes, timeout=timeout,
                                             bucket_bytes=bucket_bytes)
            runtime.init(settings)  # (does not start TensorFlow's runtime)
            # Before anything starts TensorFlow:
            inter_op_threads.ensure_for_overlap(settings.bucket_bytes, runtime.size(), runtime.local_size())
        except Exception as e:
            raise RuntimeError(f"RingStrategy could not start tfring: {e}") from e
        self.rank = runtime.rank()
        self.size = runtime.size()
        install.install_all()
        shared_seed.agree_on_random_state(self.rank, self.size, joining=runtime.joining())
        self.random_state_digest = shared_seed.state_digest()  # (what a rank joining later must match)
        if device is None:
            device = replica_device(len(tf.config.list_logical_devices("GPU")), runtime.local_rank())
        bucket_bytes = buckets.agreed(settings.bucket_bytes, device, self.size)
        tune = bucket_bytes == "auto" and self.size > 1
        bucket_bytes = buckets.untuned(bucket_bytes)  # tuned from the default; one rank has nothing to tune
        gradients = reduction.GradientSettings(self.size, bucket_bytes, bool(sparse_as_dense), hook, hook_state)
        extended = RingExtended(self, device, self.rank, self.size, gradients)
        extended.shards_optimizer_state = bool(shard_optimizer_state)
        extended.shards_gradients = bool(shard_gradients)
        distribute_lib.Strategy.__init__(self, extended)
        self.bucket_tuner = bucket_tuning.BucketTuner(extended, self.rank) if tune else None

    def _follow_runtime(self):
        """Takes this process's new rank and size after `tfring.runtime.reform` (an elastic job
        that goes on in its processes: `tfring.elastic`)."""
        self.rank, self.size = runtime.rank(), runtime.size()
        self.extended.follow(self.rank, self.size)

    @property
    def bucket_bytes(self):
        """The bytes of gradients per bucket in use (0: none). With `bucket_bytes="auto"` it is the
        size being tried until `bucket_tuner.picked` is set, then the one picked."""
        return self.extended.bucket_bytes

    def register_comm_hook(self, state, hook):
        """Sets how each bucket of dense gradients travels between the ranks, as PyTorch DDP's hooks do.

        `hook(state, bucket)` receives each bucket of this rank's gradients and returns a `Future`
        of the reduced gradients; every rank must end with identical bits. The module
        `tfring.compression` states the whole contract and holds the built-in hooks
        (`allreduce_hook`, the exact default; `cast_hook`, what `compression="fp16"` uses; `PowerSGD`). Register
        before the first `fit` (the train step reads the hook when it is traced), with the same
        hook and state on every rank.

        Args:
            state: anything the hook needs or keeps (e.g. a wire dtype; a `CommHookState` for
                rank-local memories such as error-feedback residuals).
            hook: a function `(state, GradientBucket) -> Future`.

        Raises:
            TypeError: `hook` is not callable.
            RuntimeError: a hook was registered already (or `compression` set one), or a step has
                reduced gradients already (its traced graph would keep the old hook).

        Example:

        >>> strategy.register_comm_hook(tf.bfloat16, tfring.compression.cast_hook)
        """
        if not callable(hook):
            raise TypeError(f"RingStrategy.register_comm_hook: hook must be a function (state, bucket) -> Future, "
                            f"got {type(hook).__name__}")
        settings = self.extended.gradient_settings
        if settings.hook is not default_hooks.allreduce_hook:
            raise RuntimeError(f"RingStrategy.register_comm_hook: a communication hook ({runner.hook_name(settings.hook)}) "
                               f"is registered already (register one hook, once; `compression` registers one too)")
        if settings.traced:
            raise RuntimeError("RingStrategy.register_comm_hook: a train step has reduced gradients already, and "
                               "its traced graph keeps the hook it was traced with: register the hook before "
                               "the first fit (or train step)")
        settings.hook, settings.hook_state = hook, state
