"""The rule for turning tf.data autotuning off: one core or less per rank (the strategy's use of it:
ring_strategy_test.py)."""

import pytest

from tfring.strategy.input.autotuning import cores_per_rank


@pytest.mark.parametrize("local_size, affinity, host_cores, expected", [
    (1, {0}, 2, 1.0),             # one rank pinned to one core
    (2, {1}, 2, 1.0),             # tfring run --bind-to core: each rank on its own core
    (2, {0, 1}, 2, 1.0),          # 2 unpinned ranks sharing 2 cores
    (3, {0, 1}, 2, 2 / 3),        # more ranks than cores
    (1, {0, 1}, 2, 2.0),          # one rank with the whole host
    (4, set(range(64)), 64, 16.0),
    (1, {0, 1}, 64, 2.0),         # a container limited to 2 of the host's cores
])
def test_cores_per_rank(local_size, affinity, host_cores, expected):
    assert cores_per_rank(local_size, affinity, host_cores) == pytest.approx(expected)
