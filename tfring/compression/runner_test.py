"""The hook runner and the built-in hooks in one process (a job of one rank: every allreduce is an identity)."""

import numpy as np
import pytest
import tensorflow as tf

from tfring.compression import adasum
from tfring.compression import default_hooks
from tfring.compression import registry
from tfring.compression import runner


def _buckets():
    return [[tf.constant([1.0, 2.0]), tf.constant([3], tf.int32)], [tf.constant([[0.5]], tf.float64)]]


@pytest.mark.parametrize("overlap", [False, True])
def test_the_exact_hook_returns_each_bucket_as_it_is(overlap):
    @tf.function
    def run():
        return runner.run(default_hooks.allreduce_hook, None, _buckets(), "sum", overlap)

    for got, sent in zip(run(), _buckets()):
        for g, s in zip(got, sent):
            assert g.dtype == s.dtype
            np.testing.assert_array_equal(g, s)


def test_the_cast_hook_sends_floats_narrow_and_gives_them_back_in_their_type():
    seen = []

    def spy(state, bucket):
        future = default_hooks.cast_hook(state, bucket)
        seen.append(bucket.gradients)
        return future

    out = runner.run(spy, tf.float16, [[tf.constant([1.0 + 2 ** -20]), tf.constant([7], tf.int32)]], "sum", False)
    assert [o.dtype for o in out[0]] == [tf.float32, tf.int32]
    assert float(out[0][0][0]) == 1.0  # rounded to float16 on the way
    assert int(out[0][1][0]) == 7


def test_hooks_see_every_bucket_in_order_before_any_wait():
    events = []

    def recording(state, bucket):
        events.append(("hook", bucket.index, bucket.is_last))
        future = bucket.allreduce(bucket.gradients)
        return future.then(lambda reduced: events.append(("wait", bucket.index)) or reduced)

    runner.run(recording, None, _buckets(), "sum", False)
    assert events == [("hook", 0, False), ("hook", 1, True), ("wait", 0), ("wait", 1)]


def test_a_hook_that_returns_no_future_is_named():
    def plain(state, bucket):
        return bucket.gradients

    with pytest.raises(TypeError, match="plain returned list, not a Future"):
        runner.run(plain, None, _buckets(), "sum", False)


def test_a_hook_that_returns_other_tensors_is_named():
    def dropping(state, bucket):
        return bucket.allreduce(bucket.gradients[:1])

    with pytest.raises(TypeError, match=r"dropping returned tensors .* for bucket 0"):
        runner.run(dropping, None, _buckets(), "sum", False)


def test_compression_names_its_hook():
    assert registry.for_compression(None) == (None, default_hooks.allreduce_hook)
    assert registry.for_compression("bf16") == (tf.bfloat16, default_hooks.cast_hook)
    assert registry.for_compression("adasum") == (None, adasum.adasum_hook)

    with pytest.raises(ValueError, match="compression must be None, 'fp16', 'bf16', 'adasum' or a compressor"):
        registry.for_compression("int8")
