"""`bucket_tuning.candidates`: which bucket sizes `bucket_bytes="auto"` times for a model."""

from tfring.strategy.gradients import bucket_tuning

MiB = 1 << 20


def test_sizes_below_the_gradients_and_one_that_holds_them_all():
    assert bucket_tuning.candidates(5 * MiB) == [1 * MiB, 2 * MiB, 4 * MiB, 8 * MiB]
    assert bucket_tuning.candidates(4 * MiB) == [1 * MiB, 2 * MiB, 4 * MiB]
    assert bucket_tuning.candidates(85 * MiB) == [m * MiB for m in (1, 2, 4, 8, 16, 32)]


def test_small_gradients_leave_one_candidate():
    assert bucket_tuning.candidates(1000) == [1 * MiB]
    assert bucket_tuning.candidates(1000, sizes=(256, 4096)) == [256, 4096]
