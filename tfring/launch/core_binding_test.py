"""`core_binding`: how a host's cores are shared out among its ranks."""

import pytest

from tfring.launch import core_binding


def test_cores_are_cut_into_contiguous_blocks_as_even_as_they_go():
    eight = set(range(8))
    assert [core_binding.cores_for(r, 2, eight) for r in range(2)] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert [core_binding.cores_for(r, 3, eight) for r in range(3)] == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert [core_binding.cores_for(r, 2, {2, 3}) for r in range(2)] == [[2], [3]]
    assert core_binding.cores_for(0, 1, {1, 5}) == [1, 5]


def test_every_core_goes_to_exactly_one_rank():
    for cores in (set(range(7)), {0, 2, 4, 6, 9}, set(range(64))):
        for size in range(1, len(cores) + 1):
            shares = [core_binding.cores_for(r, size, cores) for r in range(size)]
            assert all(shares) and sorted(c for s in shares for c in s) == sorted(cores)


def test_more_ranks_than_cores_is_refused_naming_the_cores():
    with pytest.raises(ValueError, match=r"3 ranks on this host but only 2 usable core\(s\) \(0,4\)"):
        core_binding.cores_for(0, 3, {0, 4})
    with pytest.raises(ValueError, match=r"\(0-3,8\)"):
        core_binding.cores_for(0, 6, {0, 1, 2, 3, 8})


def test_plan_binds_only_in_core_mode():
    assert core_binding.plan("none", 0, 99) is None
    with pytest.raises(ValueError, match="--bind-to must be one of none, core, got 'socket'"):
        core_binding.plan("socket", 0, 1)
