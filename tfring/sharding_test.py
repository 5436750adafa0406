"""The one sharding rule (plain Python; `tfring.data` and `RingStrategy` both follow it)."""

import pytest

from tfring import sharding


def test_the_batch_size_is_global_and_must_divide_by_the_ranks():
    assert sharding.rank_batch(256, 4) == 64
    assert sharding.rank_batch(7, 1) == 7
    with pytest.raises(ValueError, match=r"tfrecord_dataset: batch_size is the global batch \(3\), which must "
                                         r"divide evenly among the 2 ranks; use a multiple of 2"):
        sharding.rank_batch(3, 2, where="tfrecord_dataset")
    with pytest.raises(ValueError, match=r"RingStrategy: the dataset's batch size is the global batch \(33\)"):
        sharding.rank_batch(33, 2, what="the dataset's batch size")


def test_uneven_rows_go_to_the_first_ranks():
    assert [sharding.rank_rows(13, r, 2) for r in range(2)] == [(0, 7), (7, 6)]
    assert [sharding.rank_rows(1, r, 2) for r in range(2)] == [(0, 1), (1, 0)]  # rank 1 gets none
    assert [sharding.rank_rows(0, r, 3) for r in range(3)] == [(0, 0)] * 3
    assert [sharding.rank_count(10, r, 4) for r in range(4)] == [3, 3, 2, 2]


@pytest.mark.parametrize("size", [1, 2, 3, 4, 7, 16])
@pytest.mark.parametrize("rows", [0, 1, 2, 5, 13, 100, 1001])
def test_rank_rows_cover_a_batch_once_in_rank_order(rows, size):
    slices = [sharding.rank_rows(rows, r, size) for r in range(size)]
    assert [start for start, _ in slices] == [sum(c for _, c in slices[:r]) for r in range(size)]
    assert sum(count for _, count in slices) == rows
    assert max(c for _, c in slices) - min(c for _, c in slices) <= 1
    assert [c for _, c in slices] == sorted((c for _, c in slices), reverse=True)


def test_rank_rows_of_a_tensor_inside_a_graph():
    # RingStrategy cuts each batch with the rows known only when the step runs.
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec([], tf.int32)])
    def slice_of_rank_2(rows):
        start, count = sharding.rank_rows(rows, 2, 3)
        return tf.stack([start, count])

    assert slice_of_rank_2(tf.constant(13)).numpy().tolist() == [9, 4]  # 5, 4, 4
    assert slice_of_rank_2(tf.constant(1)).numpy().tolist() == [1, 0]


def test_ranks_read_whole_files_when_there_is_one_for_each():
    assert sharding.reads_by_file(4, 4) and sharding.reads_by_file(16, 4)
    assert not sharding.reads_by_file(3, 4)
    assert not sharding.reads_by_file(None, 4)  # the input reads no files
    assert not sharding.reads_by_file(16, 1)
    assert not sharding.reads_by_file(16, 4, by="record")
    assert sharding.reads_by_file(4, 2, by="file")
    with pytest.raises(ValueError, match="tfrecord_dataset: shard='file' needs at least 4 files, there are 3"):
        sharding.reads_by_file(3, 4, by="file", where="tfrecord_dataset")
    assert sharding.rank_files(["a", "b", "c", "d", "e"], 1, 2) == ["b", "d"]
    assert sharding.rank_files(["a", "b", "c"], 0, 2) == ["a", "c"]


def test_every_rank_takes_as_many_records_as_the_smallest_part():
    # Files of 7, 7 and 6 records over 2 ranks by file: rank 0 holds 13, rank 1 holds 7.
    counts = [7, 7, 6]
    found = [sum(sharding.rank_files(counts, r, 2)) for r in range(2)]
    assert found == [13, 7] and sharding.records_per_rank(found, 2, by_file=True) == 7
    # By record every rank reads all 20 and keeps every 2nd: 10 each; 21 over 2 leaves 11 and 10.
    assert sharding.records_per_rank([20, 20], 2, by_file=False) == 10
    assert sharding.records_per_rank([21, 21], 2, by_file=False) == 10
    assert sharding.records_per_rank([1, 1], 2, by_file=False) == 0
