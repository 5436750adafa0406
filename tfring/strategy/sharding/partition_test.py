"""The partition alone: deterministic, balanced by bytes, whole variables."""

from tfring.strategy.sharding import partition


def test_largest_first_to_the_lightest_rank():
    assert partition.owners([400, 100, 100, 100, 100], 2) == [0, 1, 1, 1, 1]
    assert partition.owners([8, 8, 8], 3) == [0, 1, 2]
    assert partition.owners([1, 2, 3, 4], 2) == [0, 1, 1, 0]


def test_every_rank_gets_close_to_an_even_share():
    sizes = [4 * (k % 7 + 1) * 1000 for k in range(50)]
    for size in (2, 3, 4):
        owned = partition.owners(sizes, size)
        loads = [sum(b for b, o in zip(sizes, owned) if o == r) for r in range(size)]
        assert max(loads) - min(loads) <= max(sizes)


def test_more_ranks_than_variables_leaves_some_without():
    assert partition.owners([10, 20], 4) == [1, 0]
