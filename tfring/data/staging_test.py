"""tfring.data.stage in one process: copy and verify, reuse, a damaged shard, a full disk, the waiting side."""

import json
import os
import shutil
import threading
import time

import numpy as np
import pytest

from tfring.data import staging
from tfring.data.writer import write_tfrecords


@pytest.fixture
def dataset(tmp_path):
    np.save(tmp_path / "v.npy", np.arange(300, dtype="int64").reshape(100, 3))
    write_tfrecords(str(tmp_path / "v.npy"), str(tmp_path / "shared" / "train"), num_shards=3, progress=False)
    return str(tmp_path / "shared" / "train")


def _as_local_rank(monkeypatch, rank):
    monkeypatch.setattr(staging.runtime, "local_rank", lambda: rank)


def _shards(prefix):
    folder, name = os.path.split(prefix)
    return sorted(f for f in os.listdir(folder) if f.startswith(name + "-"))


def test_local_rank_0_copies_verified_shards_and_the_meta(tmp_path, dataset, monkeypatch):
    _as_local_rank(monkeypatch, 0)
    local = staging.stage(dataset, str(tmp_path / "local"))
    assert local == str(tmp_path / "local" / "train")
    assert _shards(local) == _shards(dataset)
    for name in _shards(dataset):
        assert (tmp_path / "local" / name).read_bytes() == (tmp_path / "shared" / name).read_bytes()
    assert open(local + ".meta.json").read() == open(dataset + ".meta.json").read()
    import tensorflow as tf

    from tfring.data.pipeline import tfrecord_dataset

    rows = sum(int(tf.nest.flatten(b)[0].shape[0]) for b in tfrecord_dataset(local, batch_size=25, shuffle=False))
    assert rows == 100


def test_a_complete_copy_is_reused_and_a_changed_dataset_copied_again(tmp_path, dataset, monkeypatch):
    _as_local_rank(monkeypatch, 0)
    staging.stage(dataset, str(tmp_path / "local"))
    monkeypatch.setattr(staging, "_copy_shard", lambda *a: pytest.fail("copied again"))
    staging.stage(dataset, str(tmp_path / "local"))
    monkeypatch.undo()
    _as_local_rank(monkeypatch, 0)
    shutil.rmtree(tmp_path / "shared")
    write_tfrecords(str(tmp_path / "v.npy"), dataset, num_shards=2, progress=False)  # converted anew
    local = staging.stage(dataset, str(tmp_path / "local"))
    assert json.load(open(local + ".meta.json"))["total"] == 100 and len(json.load(open(local + ".meta.json"))["shards"]) == 2


def test_a_damaged_shard_is_named_and_never_lands(tmp_path, dataset, monkeypatch):
    _as_local_rank(monkeypatch, 0)
    shard = os.path.join(os.path.dirname(dataset), _shards(dataset)[1])
    data = bytearray(open(shard, "rb").read())
    data[20] ^= 0xFF  # same size, other bytes
    open(shard, "wb").write(bytes(data))
    with pytest.raises(ValueError, match=f"{os.path.basename(shard)} does not match the SHA-256 .*convert the data again"):
        staging.stage(dataset, str(tmp_path / "local"))
    assert _shards(str(tmp_path / "local" / "train")) == [_shards(dataset)[0]]  # only the good one before it
    assert not os.path.exists(tmp_path / "local" / "train.staged.json")


def test_an_interrupted_copy_keeps_only_the_shards_that_hash_right(tmp_path, dataset, monkeypatch):
    _as_local_rank(monkeypatch, 0)
    local = tmp_path / "local"
    local.mkdir()
    names = _shards(dataset)
    shutil.copy(os.path.join(os.path.dirname(dataset), names[0]), local / names[0])  # whole: kept
    stale = bytearray((tmp_path / "shared" / names[1]).read_bytes())
    stale[10] ^= 0xFF  # right size, wrong bytes (an older conversion's shard)
    (local / names[1]).write_bytes(bytes(stale))
    copied = []
    real = staging._copy_shard
    monkeypatch.setattr(staging, "_copy_shard", lambda src, dst, shard: copied.append(shard["file"]) or real(src, dst, shard))
    staging.stage(dataset, str(local))
    assert copied == names[1:]
    assert (local / names[1]).read_bytes() == (tmp_path / "shared" / names[1]).read_bytes()


def test_the_waiting_ranks_get_local_rank_0s_error(tmp_path, dataset, monkeypatch):
    _as_local_rank(monkeypatch, 0)
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(staging.shutil, "disk_usage", lambda path: usage._replace(free=100))
    with pytest.raises(OSError):
        staging.stage(dataset, str(tmp_path / "local"))
    _as_local_rank(monkeypatch, 1)
    with pytest.raises(RuntimeError, match="local rank 0 could not copy .*OSError: .* has 0.0 MiB free"):
        staging.stage(dataset, str(tmp_path / "local"), timeout=10)


def test_too_little_space_fails_before_copying(tmp_path, dataset, monkeypatch):
    _as_local_rank(monkeypatch, 0)
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(staging.shutil, "disk_usage", lambda path: usage._replace(free=100))
    with pytest.raises(OSError, match="has 0.0 MiB free but the dataset needs .* MiB more.*nothing was copied"):
        staging.stage(dataset, str(tmp_path / "local"))
    assert os.listdir(tmp_path / "local") == ["train.stage-error"]  # for the host's waiting ranks


def test_other_local_ranks_wait_for_the_marker(tmp_path, dataset, monkeypatch):
    _as_local_rank(monkeypatch, 1)
    local_dir = str(tmp_path / "local")
    copier = threading.Timer(0.5, lambda: staging._copy_or_report(dataset, os.path.join(local_dir, "train"),
                                                        staging.meta_lib.load_meta(dataset),
                                                        staging._meta_text(dataset), local_dir))
    start = time.monotonic()
    copier.start()
    assert staging.stage(dataset, local_dir, timeout=30) == os.path.join(local_dir, "train")
    assert time.monotonic() - start >= 0.5 and os.path.exists(os.path.join(local_dir, "train.staged.json"))


def test_waiting_times_out_and_bad_arguments(tmp_path, dataset, monkeypatch):
    _as_local_rank(monkeypatch, 1)
    with pytest.raises(TimeoutError, match="local rank 0 did not finish copying .* within 0.3 s"):
        staging.stage(dataset, str(tmp_path / "local"), timeout=0.3)
    with pytest.raises(ValueError, match="timeout must be > 0"):
        staging.stage(dataset, str(tmp_path / "local"), timeout=0)
    with pytest.raises(FileNotFoundError, match="no dataset description"):
        staging.stage(str(tmp_path / "nothing"), str(tmp_path / "local"))


@pytest.mark.parametrize("name", ["../../victim/.bashrc", "/tmp/victim-file", "..", ".", "", "sub/train.tfrecord",
                                  "a\\b", "train\0.tfrecord", 7])
def test_a_shard_name_that_is_not_a_plain_file_name_is_refused_before_anything_is_copied(tmp_path, dataset,
                                                                                          monkeypatch, name):
    # A hostile shared dataset: its meta file names a shard outside its folder (issue 33, item 1).
    meta_path = dataset + ".meta.json"
    meta = json.load(open(meta_path))
    meta["shards"][1]["file"] = name
    with open(meta_path, "w") as f:
        json.dump(meta, f)
    victim = tmp_path / "victim"
    victim.mkdir()
    _as_local_rank(monkeypatch, 0)
    monkeypatch.setattr(staging, "_copy_shard", lambda *a: pytest.fail("copied a shard"))
    with pytest.raises(ValueError, match=r"shard 1 is named .* which is not a plain file name"):
        staging.stage(dataset, str(tmp_path / "local" / "deep"))
    assert not os.path.exists(tmp_path / "local" / "deep" / "train.meta.json")
    assert os.listdir(victim) == []
    from tfring.data.pipeline import tfrecord_dataset

    with pytest.raises(ValueError, match="not a plain file name"):
        tfrecord_dataset(dataset, batch_size=10)
