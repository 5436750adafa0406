"""Which shard files a rank reads (`tfrecord_dataset`'s first stage), without running a pipeline."""

import os

import numpy as np
import pytest

from tfring.data.file_selection import check_sizes
from tfring.data.file_selection import resolve
from tfring.data.file_selection import select_files
from tfring.data.writer import write_tfrecords


def _dataset(tmp_path, shards):
    """20 records in `shards` shards (3 shards: 7, 7 and 6 records)."""
    np.save(tmp_path / "v.npy", np.arange(40, dtype="int64").reshape(20, 2))
    prefix = str(tmp_path / f"s{shards}")
    write_tfrecords(str(tmp_path / "v.npy"), prefix, num_shards=shards, progress=False)
    return prefix


def _names(part):
    return [os.path.basename(path) for path, _ in part.files]


def test_ranks_read_whole_files_when_each_has_one(tmp_path):
    prefix = _dataset(tmp_path, 3)
    parts = [select_files(prefix, 4, rank, 2) for rank in range(2)]
    assert all(p.by_file and p.batch == 2 and p.size == 2 for p in parts)
    assert _names(parts[0]) == ["s3-00000-of-00003.tfrecord", "s3-00002-of-00003.tfrecord"]
    assert _names(parts[1]) == ["s3-00001-of-00003.tfrecord"]
    assert [p.records for p in parts] == [7, 7]  # rank 0 holds 13, rank 1 holds 7: the smaller decides


def test_ranks_share_the_records_of_fewer_files_than_ranks(tmp_path):
    prefix = _dataset(tmp_path, 1)
    part = select_files(prefix, 4, 1, 2)
    assert not part.by_file and _names(part) == ["s1-00000-of-00001.tfrecord"] and part.records == 10
    assert not select_files(_dataset(tmp_path, 3), 4, 0, 2, by="record").by_file
    with pytest.raises(ValueError, match="shard='file' needs at least 2 files, there are 1"):
        select_files(prefix, 4, 0, 2, by="file")


def test_one_rank_reads_everything_in_global_batches(tmp_path):
    part = select_files(_dataset(tmp_path, 3), 5, 0, 1)
    assert not part.by_file and len(part.files) == 3 and part.batch == 5 and part.records == 20
    assert part.record_bytes == sum(s["bytes"] for _, s in part.files) / 20


def test_a_global_batch_that_does_not_divide_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"batch_size is the global batch \(3\), which must divide evenly among "
                                         r"the 2 ranks; use a multiple of 2"):
        select_files(_dataset(tmp_path, 3), 3, 0, 2)


def test_a_glob_selects_its_shards_and_sizes_are_checked(tmp_path):
    prefix = _dataset(tmp_path, 3)
    meta, files = resolve(prefix + "-0000[02]-*")
    assert meta.total == 20 and [s["count"] for _, s in files] == [7, 6]
    assert resolve(prefix + ".meta.json")[1] == resolve(prefix)[1]
    (tmp_path / "other.tfrecord").write_bytes(b"")
    with pytest.raises(ValueError, match="other.tfrecord is not a tfring shard"):
        resolve(str(tmp_path / "other*"))
    with pytest.raises(FileNotFoundError, match="no files match"):
        resolve(str(tmp_path / "nothing*"))
    path, shard = files[0]
    with open(path, "ab") as f:
        f.write(b"x")
    with pytest.raises(ValueError, match=r"s3-00000-of-00003.tfrecord is longer than written: \d+ bytes"):
        check_sizes(files)
    os.remove(path)
    with pytest.raises(FileNotFoundError, match="listed in the meta file is missing"):
        check_sizes(files)
