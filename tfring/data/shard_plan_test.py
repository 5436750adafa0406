"""The conversion's plan and its resume state, without writing a dataset."""

import json
import os

import numpy as np
import pytest

from tfring.data import shard_plan
from tfring.data.encoding import example_bytes
from tfring.data.shard_plan import ShardPlan
from tfring.data.shard_writer import sha256_of
from tfring.data.sources.arrays import ArraySource


def _source(n=50):
    return ArraySource({"x": np.arange(n, dtype="int64")}, {"format": "numpy", "path": "x.npy"})


def test_parse_size():
    assert shard_plan.parse_size("128MB") == 128 * 10**6
    assert shard_plan.parse_size("1 GiB") == 2**30
    assert shard_plan.parse_size(500000) == shard_plan.parse_size("500000") == 500000
    for bad in ("lots", "0MB", "-1", True, "12TB"):
        with pytest.raises(ValueError, match="not a size"):
            shard_plan.parse_size(bad)


def test_examples_are_split_evenly_in_order_or_shuffled():
    source = _source()
    shards = shard_plan.split_examples(source, 4, None)
    assert [len(s) for s in shards] == [13, 13, 12, 12] and sum(shards, []) == list(range(50))
    shuffled = shard_plan.split_examples(source, 4, None, shuffle=True, seed=3)
    assert shuffled == shard_plan.split_examples(source, 4, None, shuffle=True, seed=3)
    assert sorted(sum(shuffled, [])) == list(range(50)) and sum(shuffled, []) != list(range(50))
    assert len(shard_plan.split_examples(source, 80, None)) == 50  # never an empty shard


def test_a_shard_size_sets_the_number_of_shards():
    source = _source()
    example = len(example_bytes(source.features, source.example(0)))  # every example's size here
    assert len(shard_plan.split_examples(source, None, 10**9)) == 1
    assert len(shard_plan.split_examples(source, None, 10 * example)) == 5
    assert len(shard_plan.split_examples(source, None, 1)) == 50


def _start(tmp_path, resume=False, seed=None):
    source = _source(10)
    shards = shard_plan.split_examples(source, 3, None)
    prefix = str(tmp_path / "d")
    return ShardPlan.start(prefix, shards, shard_plan.fingerprint(source, shards, False, seed, "gzip"), resume)


def test_a_new_plan_is_saved_and_refuses_to_mix_with_another_dataset(tmp_path):
    plan = _start(tmp_path)
    assert json.load(open(plan.path)) == {"fingerprint": plan.fingerprint, "done": {}}
    assert plan.fingerprint["shards"] == [4, 3, 3] and plan.file_name(2).endswith("d-00002-of-00003.tfrecord.gz")
    with pytest.raises(ValueError, match=r"d already holds a dataset \(1 files, e.g. d.plan.json\)"):
        _start(tmp_path)  # without resume, an existing plan is another dataset
    (tmp_path / "d-00000-of-00003.tfrecord.gz.tmp-1-2").write_bytes(b"partial")  # a killed run's
    _start(tmp_path, resume=True)
    assert not list(tmp_path.glob("*.tmp-*"))


def test_a_committed_shard_is_in_the_plan_before_it_has_its_name(tmp_path):
    plan = _start(tmp_path)
    partial = str(tmp_path / "partial")
    open(partial, "wb").write(b"records")
    record = {"file": os.path.basename(plan.file_name(1)), "count": 3, "bytes": 7, "sha256": sha256_of(partial),
              "skipped": [], "image_shapes": []}
    plan.commit(1, partial, record)
    assert json.load(open(plan.path))["done"] == {"1": record}
    assert open(plan.file_name(1), "rb").read() == b"records" and not os.path.exists(partial)
    assert plan.kept(1) == record and plan.kept(0) is None


def test_resume_keeps_verified_shards_and_refuses_other_arguments(tmp_path):
    plan = _start(tmp_path)
    partial = str(tmp_path / "partial")
    open(partial, "wb").write(b"records")
    plan.commit(0, partial, {"file": "x", "count": 4, "bytes": 7, "sha256": sha256_of(partial), "skipped": []})
    resumed = _start(tmp_path, resume=True)
    assert resumed.kept(0)["count"] == 4
    open(plan.file_name(0), "ab").write(b"!")  # changed since: written again
    assert resumed.kept(0) is None
    with pytest.raises(ValueError, match="--resume: .*d.plan.json was written for other arguments"):
        _start(tmp_path, resume=True, seed=1)
    assert not shard_plan.finished(str(tmp_path / "d"), resume=True)
    resumed.remove()
    open(str(tmp_path / "d.meta.json"), "w").write("{}")
    assert shard_plan.finished(str(tmp_path / "d"), resume=True)
    assert not shard_plan.finished(str(tmp_path / "d"), resume=False)
