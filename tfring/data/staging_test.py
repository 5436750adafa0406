"""tfring.data.stage in one process: copy and verify, reuse, damaged shards, full disks, other users'
folders, two jobs on one folder, and the job's status rounds (ranks simulated by threads)."""

import json
import os
import shutil
import threading
import time

import numpy as np
import pytest

from tfring import file_safety
from tfring.data import local_copy
from tfring.data import staging
from tfring.data.writer import write_tfrecords


def _write(tmp_path, folder="shared", rows=100, shards=3, offset=0):
    source = tmp_path / f"v{offset}.npy"
    np.save(source, np.arange(offset, offset + rows * 3, dtype="int64").reshape(rows, 3))
    prefix = str(tmp_path / folder / "train")
    write_tfrecords(str(source), prefix, num_shards=shards, progress=False)
    return prefix


@pytest.fixture
def dataset(tmp_path):
    return _write(tmp_path)


@pytest.fixture
def one_rank(monkeypatch):
    """A job of one rank, local rank 0 (the exchange is the identity)."""
    monkeypatch.setattr(staging.runtime, "local_rank", lambda: 0)
    monkeypatch.setattr(staging, "_exchange", lambda status: [status])


class _ThreadJob:
    """N ranks on one host as threads: `local_rank()` per thread, the status allgather through a barrier."""

    def __init__(self, size):
        self.size, self.local = size, threading.local()
        self.barrier = threading.Barrier(size, timeout=60)
        self.slots = [None] * size

    def exchange(self, status):
        self.slots[self.local.rank] = status
        self.barrier.wait()
        out = list(self.slots)
        self.barrier.wait()
        return out

    def run(self, monkeypatch, fn):
        monkeypatch.setattr(staging.runtime, "local_rank", lambda: self.local.rank)
        monkeypatch.setattr(staging, "_exchange", self.exchange)
        results = [None] * self.size

        def rank(r):
            self.local.rank = r
            try:
                results[r] = ("ok", fn(r))
            except Exception as e:  # noqa: BLE001  (the test looks at it)
                results[r] = ("error", e)

        threads = [threading.Thread(target=rank, args=(r,)) for r in range(self.size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        return results


def _shards(prefix):
    folder, name = os.path.split(prefix)
    return sorted(f for f in os.listdir(folder) if f.startswith(name + "-"))


def _rows(prefix):
    import tensorflow as tf

    from tfring.data.pipeline import tfrecord_dataset

    batches = tfrecord_dataset(prefix, batch_size=10, shuffle=False)
    return np.concatenate([tf.nest.flatten(b)[0].numpy().reshape(-1) for b in batches])


def test_local_rank_0_copies_verified_shards_and_the_meta(tmp_path, dataset, one_rank):
    local = staging.stage(dataset, str(tmp_path / "local"))
    assert os.path.dirname(os.path.dirname(local)) == str(tmp_path / "local") and local.endswith("/train")
    assert _shards(local) == _shards(dataset)
    for name in _shards(dataset):
        assert open(os.path.join(os.path.dirname(local), name), "rb").read() == (tmp_path / "shared" / name).read_bytes()
    assert open(local + ".meta.json").read() == open(dataset + ".meta.json").read()
    assert sorted(_rows(local)) == list(range(300))


def test_a_complete_copy_is_reused_and_a_changed_dataset_goes_to_its_own_folder(tmp_path, dataset, one_rank,
                                                                               monkeypatch):
    first = staging.stage(dataset, str(tmp_path / "local"))
    stamps = {n: os.stat(os.path.join(os.path.dirname(first), n)).st_mtime_ns for n in _shards(first)}
    monkeypatch.setattr(local_copy, "_copy_shard", lambda *a: pytest.fail("copied again"))
    assert staging.stage(dataset, str(tmp_path / "local")) == first
    monkeypatch.undo()
    monkeypatch.setattr(staging.runtime, "local_rank", lambda: 0)
    monkeypatch.setattr(staging, "_exchange", lambda status: [status])
    shutil.rmtree(tmp_path / "shared")
    _write(tmp_path, rows=50, shards=2, offset=1000)  # converted anew, same name
    second = staging.stage(dataset, str(tmp_path / "local"))
    assert second != first and len(_shards(second)) == 2 and sorted(_rows(second)) == list(range(1000, 1150))
    # The first copy, which a running job may still read, is untouched (issue 33, item 4).
    assert {n: os.stat(os.path.join(os.path.dirname(first), n)).st_mtime_ns for n in _shards(first)} == stamps
    assert sorted(_rows(first)) == list(range(300))


def test_a_reused_copy_is_hashed_and_a_tampered_shard_copied_again(tmp_path, dataset, one_rank):
    # Issue 33, item 2: reuse checked sizes only, so same-size poisoned shards were trained on.
    local = staging.stage(dataset, str(tmp_path / "local"))
    shard = os.path.join(os.path.dirname(local), _shards(local)[1])
    data = bytearray(open(shard, "rb").read())
    data[30] ^= 0x01
    os.chmod(shard, 0o600)
    open(shard, "wb").write(bytes(data))
    local = staging.stage(dataset, str(tmp_path / "local"))
    assert open(shard, "rb").read() == (tmp_path / "shared" / _shards(dataset)[1]).read_bytes()


def test_a_damaged_source_shard_is_named_and_never_lands(tmp_path, dataset, one_rank):
    shard = os.path.join(os.path.dirname(dataset), _shards(dataset)[1])
    data = bytearray(open(shard, "rb").read())
    data[20] ^= 0xFF  # same size, other bytes
    open(shard, "wb").write(bytes(data))
    with pytest.raises(ValueError, match=f"{os.path.basename(shard)} does not match the SHA-256 .*convert the data again"):
        staging.stage(dataset, str(tmp_path / "local"))
    (folder,) = os.listdir(tmp_path / "local")
    assert sorted(os.listdir(tmp_path / "local" / folder)) == [".lock", _shards(dataset)[0]]  # no partial


def test_an_interrupted_copy_keeps_whole_shards_and_removes_leftovers(tmp_path, dataset, one_rank, monkeypatch):
    local_dir = tmp_path / "local"
    folder = local_copy.folder_for(str(local_dir), "train", staging._meta_text(dataset))
    file_safety.make_private_dir(folder)
    names = _shards(dataset)
    shutil.copy(os.path.join(os.path.dirname(dataset), names[0]), os.path.join(folder, names[0]))  # whole: kept
    stale = bytearray((tmp_path / "shared" / names[1]).read_bytes())
    stale[10] ^= 0xFF  # right size, wrong bytes
    open(os.path.join(folder, names[1]), "wb").write(bytes(stale))
    for leftover in (names[2] + ".partial-99999", ".train.meta.json.tfring-0123456789ab"):  # of killed copies
        open(os.path.join(folder, leftover), "wb").write(b"x")
    copied = []
    real = local_copy._copy_shard
    monkeypatch.setattr(local_copy, "_copy_shard", lambda src, dst, shard, c: copied.append(shard["file"]) or real(src, dst, shard, c))
    staging.stage(dataset, str(local_dir))
    assert copied == names[1:]
    assert sorted(os.listdir(folder)) == [".lock"] + names + ["train.meta.json"]


def test_too_little_space_counted_in_blocks_fails_before_copying(tmp_path, dataset, one_rank, monkeypatch):
    real = os.statvfs

    class Full:
        def __init__(self, st):
            self.f_frsize, self.f_bavail = st.f_frsize, 10  # ten blocks free

    monkeypatch.setattr(local_copy.os, "statvfs", lambda path: Full(real(path)))
    with pytest.raises(OSError, match=r"has 0.0 MiB free but the dataset needs .* MiB more \(3 shards, counted in "
                                      r"\d+-byte blocks\).*nothing was copied"):
        staging.stage(dataset, str(tmp_path / "local"))
    (folder,) = os.listdir(tmp_path / "local")
    assert os.listdir(tmp_path / "local" / folder) == [".lock"]


def test_space_needed_counts_whole_blocks():
    shards = [{"bytes": 1}] * 40  # 40 bytes in 40 files: 40 blocks, not one
    assert local_copy.space_needed(shards, 0, 4096) == (40 + 64) * 4096


def test_a_local_dir_of_another_user_is_refused_naming_the_owner(tmp_path, dataset, one_rank, other_user):
    # Issue 33, item 2: a scratch folder someone else made first (with a forged copy in it) was used.
    local_dir = tmp_path / "scratch"
    local_dir.mkdir(mode=0o755)
    os.chown(local_dir, other_user.uid, other_user.gid)
    with pytest.raises(PermissionError, match=f"local_dir `{local_dir}` is owned by {other_user.name}"):
        staging.stage(dataset, str(local_dir))
    assert os.listdir(local_dir) == []


def test_a_local_dir_others_can_write_is_refused(tmp_path, dataset, one_rank):
    local_dir = tmp_path / "scratch"
    local_dir.mkdir()
    os.chmod(local_dir, 0o777)
    with pytest.raises(PermissionError, match=r"0777\): others can write to it"):
        staging.stage(dataset, str(local_dir))


def test_a_link_planted_at_the_meta_files_name_is_replaced_not_followed(tmp_path, dataset, one_rank):
    local = staging.stage(dataset, str(tmp_path / "local"))
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    os.unlink(local + ".meta.json")
    os.symlink(victim, local + ".meta.json")
    staging.stage(dataset, str(tmp_path / "local"))
    assert victim.read_text() == "keep" and not os.path.islink(local + ".meta.json")


def test_a_private_dataset_stays_private(tmp_path, one_rank, other_user):
    # Issue 33, item 3: a 0700 folder of 0600 shards was copied as 0755/0644.
    dataset = _write(tmp_path)
    for name in os.listdir(tmp_path / "shared"):
        os.chmod(tmp_path / "shared" / name, 0o600)
    os.chmod(tmp_path / "shared", 0o700)
    os.chmod(tmp_path, 0o755)
    local_dir = tmp_path / "scratch"
    old = os.umask(0o022)
    try:
        local = staging.stage(dataset, str(local_dir))
    finally:
        os.umask(old)
    folder = os.path.dirname(local)
    assert os.stat(local_dir).st_mode & 0o777 == 0o700 and os.stat(folder).st_mode & 0o777 == 0o700
    assert {os.stat(os.path.join(folder, n)).st_mode & 0o777 for n in _shards(local)} == {0o600}
    shard = os.path.join(folder, _shards(local)[0])
    assert other_user.run(["cat", shard]).returncode != 0


def test_two_jobs_staging_same_named_datasets_into_one_folder_each_read_their_own(tmp_path, monkeypatch):
    # Issue 33, item 4: concurrently, one job returned holding the other dataset's shards.
    a = _write(tmp_path, folder="a", rows=60, shards=4, offset=0)
    b = _write(tmp_path, folder="b", rows=60, shards=4, offset=5000)
    monkeypatch.setattr(staging.runtime, "local_rank", lambda: 0)
    monkeypatch.setattr(staging, "_exchange", lambda status: [status])
    results = {}
    jobs = [threading.Thread(target=lambda p=p: results.__setitem__(p, staging.stage(p, str(tmp_path / "local"))))
            for p in (a, b, a)]
    for t in jobs:
        t.start()
    for t in jobs:
        t.join(120)
    assert sorted(_rows(results[a])) == list(range(180))
    assert sorted(_rows(results[b])) == list(range(5000, 5180))


def test_the_same_dataset_staged_by_two_jobs_at_once_is_copied_once(tmp_path, dataset, monkeypatch):
    monkeypatch.setattr(staging.runtime, "local_rank", lambda: 0)
    monkeypatch.setattr(staging, "_exchange", lambda status: [status])
    copied = []
    real = local_copy._copy_shard

    def slow(src, dst, shard, cancelled):
        copied.append(shard["file"])
        time.sleep(0.2)
        real(src, dst, shard, cancelled)

    monkeypatch.setattr(local_copy, "_copy_shard", slow)
    out = []
    jobs = [threading.Thread(target=lambda: out.append(staging.stage(dataset, str(tmp_path / "local")))) for _ in range(2)]
    for t in jobs:
        t.start()
    for t in jobs:
        t.join(60)
    assert len(out) == 2 and out[0] == out[1] and sorted(copied) == _shards(dataset)


def test_every_rank_gets_a_hosts_failure_at_once(tmp_path, dataset, monkeypatch):
    shard = os.path.join(os.path.dirname(dataset), _shards(dataset)[2])
    open(shard, "ab").write(b"!")  # a damaged shard
    start = time.monotonic()
    results = _ThreadJob(3).run(monkeypatch, lambda r: staging.stage(dataset, str(tmp_path / "local"), timeout=600))
    assert time.monotonic() - start < 10
    assert results[0][0] == "error" and isinstance(results[0][1], ValueError)
    for kind, error in results[1:]:
        assert kind == "error" and isinstance(error, RuntimeError)
        assert "rank 0 on host" in str(error) and "ValueError" in str(error) and "does not match the SHA-256" in str(error)


def test_the_other_ranks_wait_for_the_copy_and_return_its_prefix(tmp_path, dataset, monkeypatch):
    real = local_copy.make
    monkeypatch.setattr(local_copy, "make", lambda *a: (time.sleep(1.5), real(*a)))
    start = time.monotonic()
    results = _ThreadJob(2).run(monkeypatch, lambda r: staging.stage(dataset, str(tmp_path / "local"), timeout=30))
    assert time.monotonic() - start >= 1.5
    assert results[0] == results[1] and results[0][0] == "ok" and os.path.exists(results[0][1] + ".meta.json")


def test_a_copy_past_the_deadline_stops_on_every_rank(tmp_path, dataset, monkeypatch):
    def endless(prefix, folder, meta, text, cancelled, timeout, mode):
        while not cancelled():
            time.sleep(0.05)

    monkeypatch.setattr(local_copy, "make", endless)
    results = _ThreadJob(2).run(monkeypatch, lambda r: staging.stage(dataset, str(tmp_path / "local"), timeout=1))
    for kind, error in results:
        assert kind == "error" and isinstance(error, TimeoutError)
        assert "did not finish within 1 s (still copying: rank 0 on" in str(error)


def test_bad_arguments(tmp_path, dataset, one_rank):
    with pytest.raises(ValueError, match="timeout must be > 0"):
        staging.stage(dataset, str(tmp_path / "local"), timeout=0)
    with pytest.raises(ValueError, match="folder_mode"):
        staging.stage(dataset, str(tmp_path / "local"), folder_mode=0o600)
    with pytest.raises(FileNotFoundError, match="no dataset description"):
        staging.stage(str(tmp_path / "nothing"), str(tmp_path / "local"))


def test_a_full_disk_is_seen_in_blocks_and_a_copy_that_fills_it_leaves_nothing(tmp_path, one_rank, small_disk,
                                                                                monkeypatch):
    # Issue 33, item 11: 40 small shards pass a check of bytes but need 40 blocks.
    small_disk = small_disk("128k")
    dataset = _write(tmp_path, rows=40, shards=40)
    with pytest.raises(OSError, match="counted in 4096-byte blocks"):
        staging.stage(dataset, str(small_disk / "local"))
    monkeypatch.setattr(local_copy, "_check_space", lambda *a: None)
    with pytest.raises(OSError, match="filled up while copying .* the partial file was removed"):
        staging.stage(dataset, str(small_disk / "local"))
    (folder,) = os.listdir(small_disk / "local")
    assert not [n for n in os.listdir(small_disk / "local" / folder) if "partial" in n]


@pytest.mark.parametrize("name", ["../../victim/.bashrc", "/tmp/victim-file", "..", ".", "", "sub/train.tfrecord",
                                  "a\\b", "train\0.tfrecord", 7])
def test_a_shard_name_that_is_not_a_plain_file_name_is_refused_before_anything_is_copied(tmp_path, dataset,
                                                                                          one_rank, monkeypatch, name):
    # A hostile shared dataset: its meta file names a shard outside its folder (issue 33, item 1).
    meta_path = dataset + ".meta.json"
    meta = json.load(open(meta_path))
    meta["shards"][1]["file"] = name
    with open(meta_path, "w") as f:
        json.dump(meta, f)
    victim = tmp_path / "victim"
    victim.mkdir()
    monkeypatch.setattr(local_copy, "_copy_shard", lambda *a: pytest.fail("copied a shard"))
    with pytest.raises(ValueError, match=r"shard 1 is named .* which is not a plain file name"):
        staging.stage(dataset, str(tmp_path / "local" / "deep"))
    assert not os.path.exists(tmp_path / "local" / "deep")
    assert os.listdir(victim) == []
    from tfring.data.pipeline import tfrecord_dataset

    with pytest.raises(ValueError, match="not a plain file name"):
        tfrecord_dataset(dataset, batch_size=10)
