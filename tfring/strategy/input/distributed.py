"""The distributed input of a RingStrategy: each rank's share of every global batch, as the input
of its one replica.

`experimental_distribute_dataset(dataset)` shards the dataset for this rank (`share`) and tunes
its parallelism for the cores the rank has (`autotuning`); `distribute_datasets_from_function`
hands the user's function this rank's `InputContext`. Either way the dataset's own iterator feeds
the step (`RankInputs.one_replica_input` says why).
"""

import collections

import tensorflow as tf
from tensorflow.python.distribute import distribute_lib
from tensorflow.python.distribute import input_util

from tfring import runtime
from tfring.strategy.input import autotuning
from tfring.strategy.input import share as shares

# How many distributed datasets a strategy keeps its rank's share of (a training set, a
# validation set, ...), so that fit and evaluate called again do not shard them again.
SHARED_INPUTS_KEPT = 4


class RankInputs:
    """This rank's input for a `RingExtended`.

    Args:
        extended: the strategy's `RingExtended` (its input workers and strategy).
        rank: this process's rank.
        size: the number of ranks.

    Example:

    >>> inputs = RankInputs(extended, rank=0, size=2)
    >>> inputs.distribute(dataset)   # what experimental_distribute_dataset returns
    """

    def __init__(self, extended, rank, size):
        self._extended = extended
        self._rank = rank
        self._size = size
        self._sharded = collections.OrderedDict()  # id(dataset) -> (dataset, this rank's share)

    def distribute(self, dataset):
        """This rank's share of `dataset`, as the distributed input of its replica.

        Args:
            dataset: a batched `tf.data.Dataset` of global batches.

        Returns:
            A distributed dataset.
        """
        return self.one_replica_input(self.share_of(dataset))

    def share_of(self, dataset):
        """This rank's share of `dataset`, made once for the last few datasets distributed.

        Keras distributes the same dataset again at every fit/evaluate call; sharding it anew
        traced the slicing function and read the dataset's graph each time. The entries hold
        their datasets (a share refers to its input anyway), so only `SHARED_INPUTS_KEPT` are kept.

        Args:
            dataset: a batched `tf.data.Dataset`.

        Returns:
            A `tf.data.Dataset`.
        """
        entry = self._sharded.get(id(dataset))
        if entry is None or entry[0] is not dataset:
            share = shares.shard_for_rank(dataset, self._rank, self._size)
            entry = (dataset, autotuning.for_rank(share, runtime.local_size()))
            self._sharded[id(dataset)] = entry
            while len(self._sharded) > SHARED_INPUTS_KEPT:
                self._sharded.popitem(last=False)
        self._sharded.move_to_end(id(dataset))
        return entry[1]

    def from_function(self, dataset_fn):
        """The dataset `dataset_fn` makes for this rank's input context, as the replica's input.

        Args:
            dataset_fn: a function of a `tf.distribute.InputContext` returning a dataset.

        Returns:
            A distributed dataset.
        """
        dataset = shares.without_autoshard(dataset_fn(self.context()))
        return self.one_replica_input(autotuning.for_rank(dataset, runtime.local_size()))

    def context(self):
        """This rank's `tf.distribute.InputContext` (one input pipeline per rank)."""
        return distribute_lib.InputContext(num_input_pipelines=self._size, input_pipeline_id=self._rank,
                                           num_replicas_in_sync=self._size)

    def one_replica_input(self, dataset):
        """This rank's batches as the distributed input of its one replica, iterated directly.

        tf.distribute's default for a single device prefetches through a MultiDeviceIterator, whose
        background thread can still be inside the dataset's GetNext when Keras drops the iterator at
        the end of an epoch: on TensorFlow 2.21 that crashed `evaluate` with SIGSEGV about once in
        a few hundred epochs. With one replica per process there is nothing to spread over devices,
        so the dataset's own iterator is used (per-replica input, no fetch to device; the input
        options' prefetch-to-device settings have nothing to act on).

        Args:
            dataset: this rank's `tf.data.Dataset`.

        Returns:
            A distributed dataset.
        """
        per_replica = tf.distribute.InputOptions(
            experimental_fetch_to_device=False,
            experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA)
        return input_util.get_distributed_datasets_from_function(
            lambda _: dataset, self._extended._input_workers_with_options(per_replica), [self.context()],
            self._extended._container_strategy(), options=per_replica)
