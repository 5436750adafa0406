"""`RingExtended`: what a `RingStrategy` does in each call Keras' TensorFlow trainer makes of it
(see `ring_strategy` for the list): replicas, variables, the step, reductions and input.
"""

import tensorflow as tf
from tensorflow.python.distribute import distribute_lib
from tensorflow.python.distribute import distribute_utils
from tensorflow.python.distribute import one_device_strategy
from tensorflow.python.distribute import values as values_lib

from tfring.ops import collectives
from tfring.ops import ordering
from tfring.strategy import rank_statistics
from tfring.strategy import replica_count_warning
from tfring.strategy import step_outputs
from tfring.strategy import step_rows
from tfring.strategy.gradients import accumulation
from tfring.strategy.gradients import reduction
from tfring.strategy.input import distributed


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


def _different_variables(error, name, value):
    """The error for ranks whose variable creations disagree (a model built differently per rank)."""
    if "ranks passed different inputs" not in error.message:
        return error
    # The engine's own line, without its guess about steps and datasets (this is a model's variables).
    first = error.message.strip().splitlines()[0].split(" (if this is not a bug")[0]
    return type(error)(error.node_def, error.op, (
        f"tfring: the ranks created different variables in strategy.scope() (this rank: {name!r}, "
        f"{value.dtype.name} {value.shape.as_list()}): they built different models (a layer on some ranks "
        f"only, layers in another order?). Every rank must build the same model; each variable takes rank "
        f"0's initial value as it is created. ({first})"))


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
        self.inputs = distributed.RankInputs(self, rank, size)
        self.step_rows = None  # the StepRows of the step being traced (see step_rows)
        self.updating_by_delta = False  # an assign_add/assign_sub is being reduced (rank_statistics)
        self.statistics = None  # the StepStatistics whose assignments wait for the step's end (rank_statistics)
        self.gradient_frame = None  # what the optimizer's door did in the apply being traced (door)
        self.reducing_gradients = None  # Keras' own gradient all-reduce is traced: its variables (door)
        self.shards_optimizer_state = False  # RingStrategy(shard_optimizer_state=True) (sharding)
        self.shards_gradients = False  # RingStrategy(shard_gradients=True): gradients reduced to owners
        self.rank_own_variables = False  # variables being made differ per rank: no broadcast (sharding)

    def follow(self, rank, size):
        """Takes this process's place in a job whose ranks changed (`tfring.runtime.reform`):
        the replica id, the number of replicas, the input split and the gradients' ranks. Steps
        traced before must be traced again (Keras' functions are reset by `tfring.elastic`).

        Args:
            rank, size: the new membership's.
        """
        self._rank, self._size = rank, size
        self.inputs = distributed.RankInputs(self, rank, size)
        self.gradient_settings.size = size

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
        if self.step_rows is not None:
            replica_count_warning.warn_if_read_by_the_script()
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
        if synchronization == tf.VariableSynchronization.NONE or self.rank_own_variables:
            # "One copy, never synchronized": this rank's own (a communication hook's memories).
            return super()._create_variable(next_creator, **kwargs)
        if synchronization == tf.VariableSynchronization.ON_READ:
            # Read through _reduce_to: a metric's result() outside the step is global.
            return self._distributed_variable(next_creator, kwargs)
        if self._size > 1:
            initial_value = _unwrap_initial_value(kwargs["initial_value"])
            kwargs["initial_value"] = self._from_rank0(initial_value, kwargs.get("dtype"), kwargs.get("name"))
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

    def _from_rank0(self, initial_value, dtype, name):
        def from_rank0():
            value = initial_value() if callable(initial_value) else initial_value
            value = tf.convert_to_tensor(value, dtype=dtype)
            try:
                return collectives.broadcast(value, root_rank=0)
            except tf.errors.FailedPreconditionError as e:
                raise _different_variables(e, name, value) from e

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
            outer, outer_statistics = self.step_rows, self.statistics
            if self._size > 1:
                # A call inside a step (LossScaleOptimizer's merge path) belongs to that step's rows.
                self.step_rows = outer or step_rows.StepRows.of((args, kwargs), self._size)
                if outer is None and self.step_rows is not None:
                    # The step's row counts before its compute: the gradient buckets are weighed by
                    # them, and a count that arrives late (behind the backward pass's kernels)
                    # would hold the first bucket back until the backward pass ends.
                    args, kwargs = self.step_rows.after_counts((args, kwargs))
                    if since is not None:  # (a step traced in a graph)
                        self.statistics = rank_statistics.StepStatistics(self.step_rows, since)
            try:
                outputs = fn(*args, **kwargs)
                if self.statistics is not outer_statistics:
                    self.statistics.flush()  # the step's statistics, in one collective
            finally:
                self.step_rows, self.statistics = outer, outer_statistics
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

    def reduce_gradients(self, grads, reduce_op=tf.distribute.ReduceOp.SUM, as_rows=False, by_rows=False,
                         variables=None):
        """This rank's gradients summed over the ranks (see `gradients.reduction`); None stays None.

        Args:
            grads: a list of tensors, `tf.IndexedSlices` or None.
            reduce_op: SUM or MEAN.
            as_rows: sparse gradients travel as rows (they are clipped next).
            by_rows: a MEAN that weighs each rank by its rows in the step (see `step_rows`).
            variables: each gradient's variable (the hook's `bucket.variables`), or None.

        Returns:
            A list like `grads`.
        """
        frame = self.gradient_frame
        rows = None if frame is not None and frame.zeroed else self.step_rows
        op = "mean" if reduce_op == tf.distribute.ReduceOp.MEAN else "sum"
        return reduction.reduce_gradients(self.gradient_settings, grads, op=op, rows=rows, as_rows=as_rows,
                                          by_rows=by_rows, variables=variables)

    def reduce_gradients_to_owners(self, grads, owners, as_rows=False, by_rows=False, variables=None):
        """This rank's gradients averaged over the ranks, each dense one on its owner alone (see
        `gradients.reduction.reduce_to_owners`; None where another rank owns it), sparse ones on
        every rank.

        Args:
            grads: a list of tensors, `tf.IndexedSlices` or None.
            owners: each gradient's owner rank.
            as_rows: sparse gradients travel as rows (they are clipped next).
            by_rows: a mean that weighs each rank by its rows in the step (see `step_rows`).
            variables: each gradient's variable, or None.

        Returns:
            A list like `grads`.
        """
        frame = self.gradient_frame
        rows = None if frame is not None and frame.zeroed else self.step_rows
        return reduction.reduce_to_owners(self.gradient_settings, grads, owners, op="mean", rows=rows,
                                          by_rows=by_rows, as_rows=as_rows, variables=variables)

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
                return rank_statistics.mean_over_ranks(rows, [local], [self.updating_by_delta])[0]
            return self._reduce_values(reduce_op, [local])[0]

        return tf.nest.map_structure(one, value)

    def _batch_reduce_to(self, reduce_op, value_destination_pairs, options):
        values = [v if isinstance(v, tf.IndexedSlices) else self._local_value(v) for v, _ in value_destination_pairs]
        if self._size == 1:
            return values
        if self.reducing_gradients is None:
            # Not gradients (synchronized batch norm's sums, a step's own all_reduce): exact,
            # never through the communication hook.
            return self._reduce_step_values(reduce_op, values)
        if self.gradient_frame is not None and self.gradient_frame.pass_through(values):
            return values  # gradients reduced at the optimizer's door already
        variables = self.reducing_gradients if len(self.reducing_gradients) == len(values) else None
        return self.reduce_gradients(values, reduce_op, variables=variables)

    def _reduce_step_values(self, reduce_op, values):
        """`_reduce_values`; in a step, a rank without rows adds nothing to a floating sum (its
        statistics of an empty batch may be NaN)."""
        values = [tf.convert_to_tensor(v) for v in values]
        floating = [k for k, v in enumerate(values) if v.dtype.is_floating]
        if self.step_rows is not None and reduce_op == tf.distribute.ReduceOp.SUM and floating:
            for k, v in zip(floating, self.step_rows.zero_if_empty([values[k] for k in floating])):
                values[k] = v
        return self._reduce_values(reduce_op, values)

    def _local_results(self, value):
        if isinstance(value, values_lib.DistributedValues):
            return value._values
        return (value,)

    # ---- input (see input.distributed) ----
    def _experimental_distribute_dataset(self, dataset, options):
        del options  # prefetch-to-device settings: nothing to act on with one replica per process
        return self.inputs.distribute(dataset)

    def _distribute_datasets_from_function(self, dataset_fn, options):
        del options
        return self.inputs.from_function(dataset_fn)

    @property
    def should_checkpoint(self):
        return self._rank == 0

    @property
    def should_save_summary(self):
        return self._rank == 0
