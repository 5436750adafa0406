"""RingStrategy's own choices that need no job (the multi-process behaviour: tests/ring_strategy_test.py)."""

from tfring.strategy.ring_strategy import replica_device


def test_replica_device_is_the_local_ranks_gpu_or_the_cpu():
    assert replica_device(0, 0) == "/cpu:0"
    assert replica_device(0, 3) == "/cpu:0"
    assert replica_device(1, 0) == "/gpu:0"
    assert replica_device(1, 3) == "/gpu:0"   # one visible GPU per process (CUDA_VISIBLE_DEVICES)
    assert replica_device(4, 2) == "/gpu:2"   # every GPU visible: the local rank picks
    assert replica_device(4, 5) == "/gpu:1"


def test_input_is_iterated_directly_without_a_multi_device_iterator():
    # A MultiDeviceIterator's background thread could still be inside the dataset's GetNext when Keras
    # dropped the iterator at the end of an epoch: on TF 2.21, `evaluate` died with SIGSEGV in
    # MultiDeviceBuffer::BackgroundThread (2 of 2 runs of 300 one-rank evaluates crashed before this
    # change). One replica per process has no devices to spread over: the dataset's own iterator runs.
    import tensorflow as tf

    from tfring.strategy.ring_strategy import RingStrategy

    strategy = RingStrategy()
    dataset = tf.data.Dataset.range(10).batch(4)
    for distributed in (strategy.experimental_distribute_dataset(dataset),
                        strategy.distribute_datasets_from_function(lambda ctx: dataset)):
        iterator = iter(distributed)
        kinds = {type(worker._iterator).__name__ for worker in iterator._iterators}
        assert kinds == {"OwnedIterator"}, kinds
        assert [b.numpy().tolist() for b in iterator] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_a_dataset_distributed_again_is_sharded_once(monkeypatch):
    # Keras distributes the dataset anew at every fit/evaluate call; sharding it again traced the
    # slicing function and read the dataset's graph each time (~60 ms per call on one pinned core,
    # 9 % of a 2-epoch fit in benchmarks/fit_scaling.py).
    import tensorflow as tf

    from tfring.strategy.input import share as input_sharding
    from tfring.strategy.ring_strategy import RingStrategy

    calls = []
    real = input_sharding.shard_for_rank
    monkeypatch.setattr(input_sharding, "shard_for_rank", lambda *a: calls.append(a[0]) or real(*a))
    strategy = RingStrategy()
    first, second = tf.data.Dataset.range(10).batch(4), tf.data.Dataset.range(3).batch(2)
    for dataset, batches in ((first, [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]), (second, [[0, 1], [2]])):
        for _ in range(3):
            assert [b.numpy().tolist() for b in strategy.experimental_distribute_dataset(dataset)] == batches
    assert calls == [first, second]


def test_only_the_last_few_distributed_datasets_are_kept():
    # A dataset made for each fit call (fit on NumPy arrays builds one) must not stay alive.
    import gc
    import weakref

    import tensorflow as tf

    from tfring.strategy.ring_strategy import RingStrategy

    strategy = RingStrategy()
    made = []
    for n in range(10):
        dataset = tf.data.Dataset.range(n + 1).batch(4)
        strategy.experimental_distribute_dataset(dataset)
        made.append(weakref.ref(dataset))
    del dataset
    gc.collect()
    assert [ref() is not None for ref in made] == [False] * 6 + [True] * 4


def test_auto_bucket_bytes_on_one_rank_keeps_the_default_without_tuning():
    from tfring import config
    from tfring.strategy.ring_strategy import RingStrategy

    strategy = RingStrategy(bucket_bytes="auto")
    assert strategy.bucket_tuner is None and strategy.bucket_bytes == config.Config.bucket_bytes


def _autotune_of_iterated_input(strategy, dataset):
    """`autotune.enabled` of the dataset each of the strategy's input paths iterates."""
    found = []
    for distributed in (strategy.experimental_distribute_dataset(dataset),
                        strategy.distribute_datasets_from_function(lambda ctx: dataset)):
        iterator = iter(distributed)
        found += [worker._iterator._dataset.options().autotune.enabled for worker in iterator._iterators]
    return found


def test_a_rank_with_one_core_iterates_its_input_without_tf_data_autotuning(monkeypatch):
    # tf.data's autotuning thread waits out its optimization period (which doubles up to 60 s) when
    # the iterator is dropped at each epoch's end, if it runs before the canceller marks the
    # cancellation done: TensorFlow's CancellationManager runs the wake-up callback before it sets
    # is_cancelled. On a rank with one core of its own this race is usually lost, and a fit of 2
    # short epochs took 2.5 s instead of 1.25 s (benchmarks/fit_scaling.py --parts pinned).
    import os

    import tensorflow as tf

    from tfring.strategy.ring_strategy import RingStrategy

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    strategy = RingStrategy()
    assert _autotune_of_iterated_input(strategy, tf.data.Dataset.range(10).batch(4)) == [False, False]
    chosen = tf.data.Options()
    chosen.autotune.enabled = True  # the user's own choice is kept
    kept = tf.data.Dataset.range(10).batch(4).with_options(chosen)
    assert _autotune_of_iterated_input(strategy, kept) == [True, True]


def test_a_rank_with_several_cores_keeps_tf_data_autotuning(monkeypatch):
    import os

    import tensorflow as tf

    from tfring.strategy.ring_strategy import RingStrategy

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    strategy = RingStrategy()
    assert _autotune_of_iterated_input(strategy, tf.data.Dataset.range(10).batch(4)) == [None, None]
