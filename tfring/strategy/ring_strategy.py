"""`RingStrategy`: a `tf.distribute.Strategy` with one replica per process, over tfring's ring.

Keras 3's TensorFlow trainer drives a strategy through a handful of calls; this strategy answers
each of them across processes:

- `num_replicas_in_sync` is the job size; Keras scales each rank's loss by this rank's share of the
  step's rows (1/size when the global batch divides evenly; see `step_rows`), so the summed
  gradients are the mean over the global batch;
- gradients are all-reduced as they enter the optimizer, in buckets, through a communication hook
  (see `gradients.door` and `gradients.comm_hooks`); Keras' own gradient `all_reduce`
  (`ReplicaContext.all_reduce` -> `batch_reduce_to`) then passes them through, or reduces them
  where the door leaves it to Keras (gradient accumulation, custom loops);
- every variable created in `scope()` takes rank 0's initial value (a broadcast at creation);
  metric state variables (`synchronization=ON_READ`) are sync-on-read, so reading a metric's result
  outside the step reduces it across ranks; non-trainable float variables assigned in the step
  (batch-norm moving averages) are averaged across ranks at each assignment;
- `run()` gathers each step output from every rank (`step_outputs`), so Keras' per-replica
  reduction gives global loss and metric logs and, for `predict`, the global predictions in order;
- `experimental_distribute_dataset` gives each rank its share of every global batch (by file or
  by record: see `input_sharding`).
"""

import collections

import tensorflow as tf
from tensorflow.python.distribute import distribute_lib
from tensorflow.python.distribute import distribute_utils
from tensorflow.python.distribute import input_util
from tensorflow.python.distribute import one_device_strategy
from tensorflow.python.distribute import values as values_lib

from tfring import checks
from tfring import config
from tfring import runtime
from tfring.ops import collectives
from tfring.ops import ordering
from tfring.strategy import checkpointing
from tfring.strategy import data_autotuning
from tfring.strategy import input_digest
from tfring.strategy import input_sharding
from tfring.strategy import inter_op_threads
from tfring.strategy import loss_reductions
from tfring.strategy import model_fingerprint
from tfring.strategy import on_batch
from tfring.strategy import rank_noise
from tfring.strategy import rank_statistics
from tfring.strategy import reporting
from tfring.strategy import ring_model
from tfring.strategy import scope_check
from tfring.strategy import shared_seed
from tfring.strategy import step_outputs
from tfring.strategy import step_rows
from tfring.strategy.gradients import accumulation
from tfring.strategy.gradients import bucket_tuning
from tfring.strategy.gradients import buckets
from tfring.strategy.gradients import comm_hooks
from tfring.strategy.gradients import door
from tfring.strategy.gradients import reduction

# How many distributed datasets a strategy keeps its rank's share of (a training set, a
# validation set, ...), so that fit and evaluate called again do not shard them again.
_SHARED_INPUTS_KEPT = 4


def _unwrap_initial_value(initial_value):
    # Checkpoint restore hands a CheckpointInitialValue; its wrapped tensor is what we broadcast.
    wrapped = getattr(initial_value, "wrapped_value", None)
    return wrapped if wrapped is not None else initial_value


def _is_local_statistic(kwargs):
    dtype = kwargs.get("dtype")
    floating = dtype is not None and tf.as_dtype(dtype).is_floating
    aggregation = kwargs.get("aggregation", tf.VariableAggregation.NONE)
    return (floating and not kwargs.get("trainable", True)
            and kwargs.get("synchronization", tf.VariableSynchronization.AUTO) in (
                tf.VariableSynchronization.AUTO, tf.VariableSynchronization.ON_WRITE)
            and aggregation in (tf.VariableAggregation.NONE, tf.VariableAggregation.MEAN, None))


class _RingReplicaContext(distribute_lib.ReplicaContext):
    """The replica context inside `run()`: this process is replica `rank` of `size`."""

    def __init__(self, strategy, rank):
        distribute_lib.ReplicaContext.__init__(self, strategy, replica_id_in_sync_group=rank)

    @property
    def devices(self):
        return self._strategy.extended.worker_devices


class RingExtended(one_device_strategy.OneDeviceExtended):
    """The strategy's implementation; see the module docstring for what each override is for."""

    def __init__(self, container_strategy, device, rank, size, gradient_settings):
        super().__init__(container_strategy, device)
        self.gradient_settings = gradient_settings  # read when the train step is traced
        self._rank = rank
        self._size = size
        self._sharded_inputs = collections.OrderedDict()  # id(dataset) -> (dataset, this rank's share)
        self.step_rows = None  # the StepRows of the step being traced (see step_rows)
        self.updating_by_delta = False  # an assign_add/assign_sub is being reduced (rank_statistics)
        self.gradient_frame = None  # what the optimizer's door did in the apply being traced (door)

    @property
    def bucket_bytes(self):
        """Bytes of gradients per bucket, read when the train step is traced (bucket_tuning sets it)."""
        return self.gradient_settings.bucket_bytes

    @bucket_bytes.setter
    def bucket_bytes(self, value):
        self.gradient_settings.bucket_bytes = value

    # ---- replicas ----
    @property
    def _num_replicas_in_sync(self):
        return self._size

    def _get_local_replica_id(self, replica_id_in_sync_group):
        return 0

    def _in_multi_worker_mode(self):
        # False keeps tf.distribute's input iterator local: in multi-worker mode it all-reduces
        # "has data" at every get_next, a collective Keras' steps_per_execution loop runs unordered
        # with the step's own (ranks then disagree on the order). Ranks agree on each step's rows
        # inside the step instead (step_rows).
        return False

    # ---- variables ----
    def _create_variable(self, next_creator, **kwargs):
        if accumulation.is_accumulator(kwargs):
            # Each rank's own partial sum, all-reduced only when applied (gradients.accumulation).
            kwargs.update(synchronization=tf.VariableSynchronization.ON_READ,
                          aggregation=tf.VariableAggregation.SUM)
        synchronization = kwargs.get("synchronization", tf.VariableSynchronization.AUTO)
        if synchronization == tf.VariableSynchronization.ON_READ:
            # Read through _reduce_to: a metric's result() outside the step is global.
            return self._distributed_variable(next_creator, kwargs)
        if self._size > 1:
            initial_value = _unwrap_initial_value(kwargs["initial_value"])
            kwargs["initial_value"] = self._from_rank0(initial_value, kwargs.get("dtype"))
            if _is_local_statistic(kwargs):
                # Non-trainable floats assigned inside the step (batch-norm moving averages) are
                # statistics of each rank's data: averaged across ranks at every assignment, as
                # MirroredStrategy does with aggregation MEAN, so the ranks never drift apart.
                kwargs["aggregation"] = tf.VariableAggregation.MEAN
                return self._distributed_variable(next_creator, kwargs)
        return super()._create_variable(next_creator, **kwargs)

    def _distributed_variable(self, next_creator, kwargs):
        """A SyncOnRead or Mirrored variable (by kwargs' synchronization) with one component."""

        def one_component(**kw):
            with tf.device(self._device):
                return [next_creator(**kw)]

        return distribute_utils.create_mirrored_variable(
            self._container_strategy(), one_component, rank_statistics.MIRRORED_CLASSES,
            distribute_utils.VARIABLE_POLICY_MAPPING, **kwargs)

    def _from_rank0(self, initial_value, dtype):
        def from_rank0():
            value = initial_value() if callable(initial_value) else initial_value
            value = tf.convert_to_tensor(value, dtype=dtype)
            return collectives.broadcast(value, root_rank=0)

        return from_rank0

    def _update(self, var, fn, args, kwargs, group):
        # Updates of our one-component distributed variables go to their single component, as
        # MirroredStrategy's update does per component.
        if isinstance(var, values_lib.DistributedVariable):
            var = var._get_on_device_or_primary()
        args = distribute_utils.select_replica(0, args)
        kwargs = distribute_utils.select_replica(0, kwargs)
        return super()._update(var, fn, args, kwargs, group)

    def _update_non_slot(self, colocate_with, fn, args, kwargs, group):
        # As OneDeviceExtended, but the update context names replica 0 (an index, as distributed
        # variables expect) instead of the device.
        del colocate_with
        with tf.device(self._device), distribute_lib.UpdateContext(0):
            result = fn(*args, **kwargs)
            return result if group else tf.nest.map_structure(self._local_results, result)

    # ---- running a step ----
    def _call_for_each_replica(self, fn, args, kwargs):
        strategy = self._container_strategy()
        # The distributed iterator wraps this process's batch in one-component PerReplica values.
        args = distribute_utils.select_replica(0, args)
        kwargs = distribute_utils.select_replica(0, kwargs)
        since = ordering.mark()
        with tf.device(self._device), _RingReplicaContext(strategy, self._rank):
            outer = self.step_rows
            if self._size > 1:
                # A call inside a step (LossScaleOptimizer's merge path) belongs to that step's rows.
                self.step_rows = outer or step_rows.StepRows.of((args, kwargs), self._size)
            try:
                outputs = fn(*args, **kwargs)
            finally:
                self.step_rows = outer
        if self._size == 1:
            return outputs
        # After everything the step ran, collectives in nested graphs included (ordering).
        return ordering.after_ops_since(since, lambda: step_outputs.gather(outputs, self._size, self.step_rows))

    # ---- reductions ----
    def _reduce_values(self, reduce_op, tensors):
        # Not gradients (metrics' state, statistics): exact, in their own type, whatever the hook.
        tensors = [tf.convert_to_tensor(t) for t in tensors]
        if self._size == 1 or not tensors:
            return tensors
        return collectives.allreduce(tensors, op="mean" if reduce_op == tf.distribute.ReduceOp.MEAN else "sum")

    def reduce_gradients(self, grads, reduce_op=tf.distribute.ReduceOp.SUM, as_rows=False):
        """This rank's gradients summed over the ranks (see `gradients.reduction`); None stays None.

        Args:
            grads: a list of tensors, `tf.IndexedSlices` or None.
            reduce_op: SUM or MEAN.
            as_rows: sparse gradients travel as rows (they are clipped next).

        Returns:
            A list like `grads`.
        """
        frame = self.gradient_frame
        rows = None if frame is not None and frame.zeroed else self.step_rows
        op = "mean" if reduce_op == tf.distribute.ReduceOp.MEAN else "sum"
        return reduction.reduce_gradients(self.gradient_settings, grads, op=op, rows=rows, as_rows=as_rows)

    def _local_value(self, value):
        if isinstance(value, tf.IndexedSlices):
            return tf.convert_to_tensor(value)  # (batch reductions keep them sparse: gradients.sparse)
        if isinstance(value, values_lib.SyncOnReadVariable):
            return value._get_on_device_or_primary().read_value()
        if isinstance(value, values_lib.DistributedValues):
            return value._values[0] if len(value._values) == 1 else value
        return value

    def _reduce_to(self, reduce_op, value, destinations, options):
        def one(v):
            local = self._local_value(v)
            if isinstance(local, values_lib.PerReplica):
                # Already holds every rank's value (see step_outputs): reduce locally.
                stacked = tf.stack(local.values)
                if reduce_op == tf.distribute.ReduceOp.MEAN:
                    return tf.reduce_mean(stacked, axis=0)
                return tf.reduce_sum(stacked, axis=0)
            rows = self.step_rows
            local = tf.convert_to_tensor(local)
            if rows is not None and reduce_op == tf.distribute.ReduceOp.MEAN and local.dtype.is_floating:
                # A variable assigned in the step (batch-norm statistics).
                return rank_statistics.mean_over_ranks(rows, local, self.updating_by_delta)
            return self._reduce_values(reduce_op, [local])[0]

        return tf.nest.map_structure(one, value)

    def _batch_reduce_to(self, reduce_op, value_destination_pairs, options):
        values = [v if isinstance(v, tf.IndexedSlices) else self._local_value(v) for v, _ in value_destination_pairs]
        if self._size == 1 or (self.gradient_frame is not None and self.gradient_frame.pass_through(values)):
            return values  # one rank, or gradients reduced at the optimizer's door
        return self.reduce_gradients(values, reduce_op)

    def _local_results(self, value):
        if isinstance(value, values_lib.DistributedValues):
            return value._values
        return (value,)

    # ---- input ----
    def _experimental_distribute_dataset(self, dataset, options):
        return self._one_replica_input(self._share_of(dataset), options)

    def _share_of(self, dataset):
        """This rank's share of `dataset`, made once for the last few datasets distributed.

        Keras distributes the same dataset again at every fit/evaluate call; sharding it anew
        traced the slicing function and read the dataset's graph each time. The entries hold
        their datasets (a share refers to its input anyway), so only `_SHARED_INPUTS_KEPT` are kept.
        """
        entry = self._sharded_inputs.get(id(dataset))
        if entry is None or entry[0] is not dataset:
            share = input_sharding.shard_for_rank(dataset, self._rank, self._size)
            entry = (dataset, data_autotuning.for_rank(share, runtime.local_size()))
            self._sharded_inputs[id(dataset)] = entry
            while len(self._sharded_inputs) > _SHARED_INPUTS_KEPT:
                self._sharded_inputs.popitem(last=False)
        self._sharded_inputs.move_to_end(id(dataset))
        return entry[1]

    def _distribute_datasets_from_function(self, dataset_fn, options):
        dataset = input_sharding.without_autoshard(dataset_fn(self._input_context()))
        return self._one_replica_input(data_autotuning.for_rank(dataset, runtime.local_size()), options)

    def _input_context(self):
        return distribute_lib.InputContext(num_input_pipelines=self._size, input_pipeline_id=self._rank,
                                           num_replicas_in_sync=self._size)

    def _one_replica_input(self, dataset, options):
        """This rank's batches as the distributed input of its one replica, iterated directly.

        tf.distribute's default for a single device prefetches through a MultiDeviceIterator, whose
        background thread can still be inside the dataset's GetNext when Keras drops the iterator at
        the end of an epoch: on TensorFlow 2.21 that crashed `evaluate` with SIGSEGV about once in
        a few hundred epochs. With one replica per process there is nothing to spread over devices,
        so the dataset's own iterator is used (per-replica input, no fetch to device).
        """
        del options  # their prefetch-to-device settings have nothing to act on here
        per_replica = tf.distribute.InputOptions(
            experimental_fetch_to_device=False,
            experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA)
        return input_util.get_distributed_datasets_from_function(
            lambda _: dataset, self._input_workers_with_options(per_replica), [self._input_context()],
            self._container_strategy(), options=per_replica)

    @property
    def should_checkpoint(self):
        return self._rank == 0

    @property
    def should_save_summary(self):
        return self._rank == 0


def replica_device(visible_gpus, local_rank):
    """The default device of a rank's replica: its GPU when there are any, else the CPU.

    Args:
        visible_gpus: how many GPUs this process sees.
        local_rank: the rank's index among the ranks on its host.

    Returns:
        A device string: "/gpu:K" with K = local_rank % visible_gpus, or "/cpu:0".
    """
    return f"/gpu:{local_rank % visible_gpus}" if visible_gpus > 0 else "/cpu:0"


class RingStrategy(tf.distribute.OneDeviceStrategy, ring_model.RingStrategyBase):
    """Synchronous data parallelism with one replica per process, over tfring's ring allreduce.

    Build and compile the model inside `strategy.scope()`, then call `model.fit` as usual on every
    rank with the same code. `batch_size` (and `dataset.batch(B)`) is the global batch: each rank
    trains on its B / size rows, gradients are averaged over the global batch, and the printed loss
    and metrics are global. Any number of rows works: a short last batch is split as evenly as it
    can be and weighted by rows, so `fit`, `evaluate` and `predict` equal one process.

    Args:
        fusion_threshold_bytes: most bytes per fused allreduce pass (see `tfring.init`).
        compression: None, "fp16" or "bf16": gradients travel in that type and are cast back
            (approximate; see `register_comm_hook` for other ways gradients may travel).
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

    Example:

    >>> strategy = tfring.RingStrategy()
    >>> with strategy.scope():
    ...     model = keras.Sequential([keras.layers.Dense(1)])
    ...     model.compile(optimizer="sgd", loss="mse")
    >>> model.fit(x, y, batch_size=64, epochs=1)
    """

    def __init__(self, fusion_threshold_bytes=None, compression=None, timeout=None, device=None,
                 sparse_as_dense=False, bucket_bytes=None):
        checks.choice("RingStrategy", "compression", compression, tuple(comm_hooks.COMPRESSION))
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
        checkpointing.install()
        scope_check.install()
        step_rows.install()
        loss_reductions.install()
        door.install()
        reporting.install()
        input_digest.install()
        model_fingerprint.install()
        rank_noise.install()
        on_batch.install()
        shared_seed.agree_on_random_state(self.rank, self.size)
        if device is None:
            device = replica_device(len(tf.config.list_logical_devices("GPU")), runtime.local_rank())
        bucket_bytes = buckets.agreed(settings.bucket_bytes, device, self.size)
        tune = bucket_bytes == "auto" and self.size > 1
        if bucket_bytes == "auto":  # tuned from the default; one rank has nothing to tune
            bucket_bytes = config.Config.bucket_bytes
        state, hook = comm_hooks.for_compression(compression)
        gradients = reduction.GradientSettings(self.size, bucket_bytes, bool(sparse_as_dense), hook, state)
        extended = RingExtended(self, device, self.rank, self.size, gradients)
        distribute_lib.Strategy.__init__(self, extended)
        self.bucket_tuner = bucket_tuning.BucketTuner(extended, self.rank) if tune else None
        if tune:
            bucket_tuning.install()

    @property
    def bucket_bytes(self):
        """The bytes of gradients per bucket in use (0: none). With `bucket_bytes="auto"` it is the
        size being tried until `bucket_tuner.picked` is set, then the one picked."""
        return self.extended.bucket_bytes

    def register_comm_hook(self, state, hook):
        """Sets how each bucket of dense gradients travels between the ranks, as PyTorch DDP's hooks do.

        `hook(state, bucket)` receives each bucket of this rank's gradients and returns a `Future`
        of the reduced gradients; every rank must end with identical bits. The module
        `tfring.strategy.gradients.comm_hooks` states the whole contract and holds the built-in
        hooks (`allreduce_hook`, the exact default; `cast_hook`, what `compression` uses). Register
        before the first `fit` (the train step reads the hook when it is traced), with the same
        hook and state on every rank.

        Args:
            state: anything the hook needs or keeps (e.g. a wire dtype, residuals per bucket).
            hook: a function `(state, GradientBucket) -> Future`.

        Raises:
            TypeError: `hook` is not callable.
            RuntimeError: a hook was registered already (or `compression` set one).

        Example:

        >>> from tfring.strategy.gradients import comm_hooks
        >>> strategy.register_comm_hook(tf.bfloat16, comm_hooks.cast_hook)
        """
        if not callable(hook):
            raise TypeError(f"RingStrategy.register_comm_hook: hook must be a function (state, bucket) -> Future, "
                            f"got {type(hook).__name__}")
        settings = self.extended.gradient_settings
        if settings.hook is not comm_hooks.allreduce_hook:
            raise RuntimeError(f"RingStrategy.register_comm_hook: a communication hook ({comm_hooks.hook_name(settings.hook)}) "
                               f"is registered already (register one hook, once; `compression` registers one too)")
        settings.hook, settings.hook_state = hook, state
