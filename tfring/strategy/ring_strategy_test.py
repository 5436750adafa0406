"""RingStrategy's own choices that need no job (the multi-process behaviour: tests/ring_strategy_test.py)."""

from tfring.strategy.ring_strategy import replica_device


def test_replica_device_is_the_local_ranks_gpu_or_the_cpu():
    assert replica_device(0, 0) == "/cpu:0"
    assert replica_device(0, 3) == "/cpu:0"
    assert replica_device(1, 0) == "/gpu:0"
    assert replica_device(1, 3) == "/gpu:0"   # one visible GPU per process (CUDA_VISIBLE_DEVICES)
    assert replica_device(4, 2) == "/gpu:2"   # every GPU visible: the local rank picks
    assert replica_device(4, 5) == "/gpu:1"
