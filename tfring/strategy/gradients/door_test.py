"""The door's frame and `clips`, in one process."""

import keras
import pytest

from tfring.strategy.gradients import door


def test_a_frame_passes_the_reduced_gradients_through_once():
    frame = door.Frame(passes=2)
    assert frame.pass_through(["g1", "g2"])
    assert not frame.pass_through(["g1", "g2"])  # a second all-reduce in the same apply reduces


def test_a_frame_refuses_another_number_of_tensors():
    with pytest.raises(RuntimeError, match="handed 2 gradients, which RingStrategy all-reduced, and then asked "
                                           "to all-reduce 3 tensors"):
        door.Frame(passes=2).pass_through(["a", "b", "c"])


def test_a_frame_that_reduced_nothing_passes_nothing():
    assert not door.Frame(zeroed=True).pass_through(["g"])


def test_clips_looks_inside_wrapping_optimizers():
    sgd = keras.optimizers.SGD(0.1)
    clipping = keras.optimizers.SGD(0.1, global_clipnorm=1.0)
    assert not door.clips(sgd)
    assert door.clips(clipping)
    assert door.clips(keras.optimizers.LossScaleOptimizer(clipping))
    assert not door.clips(keras.optimizers.LossScaleOptimizer(sgd))
