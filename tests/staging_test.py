"""tfring.data.stage across two emulated hosts, each with its own local directory: local rank 0 of
each host copies, every rank reads the local copy, and a second job reuses it; a host whose disk is
too small fails every rank of the job at once."""

import os

import numpy as np
import pytest

from multihost_test import launch, two_hosts  # noqa: F401  (two_hosts is a fixture)
from tfring_dev.testing import rank_lines

pytestmark = [pytest.mark.multiprocess, pytest.mark.emulated_hosts]

STAGE = """
import os, socket, sys
import tensorflow as tf
import tfring
tfring.init()
local = tfring.data.stage(os.environ["DATA"], os.path.join(os.environ["ROOT"], socket.gethostname()))
records = sum(1 for _ in tf.data.TFRecordDataset(tf.io.gfile.glob(local + "-*.tfrecord")))
sys.stdout.write(f"STAGED {tfring.rank()} {tfring.local_rank()} {socket.gethostname()} {local} {records}\\n")
"""


def _stamps(folder):
    (copy,) = os.listdir(folder)  # one folder per dataset identity
    folder = os.path.join(folder, copy)
    return {name: os.stat(os.path.join(folder, name)).st_mtime_ns for name in sorted(os.listdir(folder))}


def test_each_host_copies_once_and_a_later_job_reuses_it(two_hosts, tmp_path):  # noqa: F811
    from tfring.data.writer import write_tfrecords

    np.save(tmp_path / "v.npy", np.arange(600, dtype="int64").reshape(200, 3))
    write_tfrecords(str(tmp_path / "v.npy"), str(tmp_path / "shared" / "train"), num_shards=4, progress=False)
    env = {"DATA": str(tmp_path / "shared" / "train"), "ROOT": str(tmp_path / "local")}
    proc = launch(two_hosts, (2, 2), STAGE, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = sorted(line for r in range(4) for line in rank_lines(proc.stdout, r) if line.startswith("STAGED"))
    hosts = ["h0", "h0", "h1", "h1"]
    copies = {h: os.listdir(tmp_path / "local" / h)[0] for h in ("h0", "h1")}
    assert copies["h0"] == copies["h1"] and copies["h0"].startswith("train.")
    assert lines == [f"STAGED {r} {r % 2} {h} {tmp_path}/local/{h}/{copies[h]}/train 200"
                     for r, h in enumerate(hosts)], lines
    stamps = {h: _stamps(tmp_path / "local" / h) for h in ("h0", "h1")}
    for h in ("h0", "h1"):
        assert sorted(stamps[h]) == [".lock"] + sorted(os.listdir(tmp_path / "shared"))
    again = launch(two_hosts, (2, 2), STAGE, env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert {h: _stamps(tmp_path / "local" / h) for h in ("h0", "h1")} == stamps  # nothing copied again


FULL = """
import os, socket, sys, time
import tfring
tfring.init()
start = time.monotonic()
try:
    tfring.data.stage(os.environ["DATA"], os.path.join(os.environ["ROOT"], socket.gethostname(), "data"), timeout=600)
except Exception as e:
    sys.stdout.write(f"FAILED {tfring.rank()} {time.monotonic() - start:.1f} {type(e).__name__}: {e}\\n")
    sys.stdout.flush()
    raise
"""


@pytest.fixture(scope="module", autouse=True)
def h1_disk(small_disk_for_module):
    """A 64 KiB tmpfs, mounted before the emulated hosts start (their mount namespaces copy the
    mounts of that moment)."""
    return small_disk_for_module("64k")


def test_a_full_disk_on_one_host_fails_every_rank_at_once(two_hosts, tmp_path, h1_disk):  # noqa: F811
    # Issue 33, item 11: h1's disk is too small. Its waiting rank, and the rank of h0 (whose copy
    # worked), learn it through the job within seconds instead of waiting out `timeout`.
    from tfring.data.writer import write_tfrecords

    np.save(tmp_path / "v.npy", np.arange(3000, dtype="int64").reshape(1000, 3))
    write_tfrecords(str(tmp_path / "v.npy"), str(tmp_path / "shared" / "train"), num_shards=40, progress=False)
    (tmp_path / "local").mkdir(mode=0o700)
    os.symlink(h1_disk, tmp_path / "local" / "h1")  # h1's local disk
    (tmp_path / "local" / "h0").mkdir(mode=0o700)
    env = {"DATA": str(tmp_path / "shared" / "train"), "ROOT": str(tmp_path / "local")}
    proc = launch(two_hosts, (1, 2), FULL, env=env, timeout=240)
    assert proc.returncode != 0, (proc.stdout[-3000:], proc.stderr[-3000:], proc.args)
    failed = {int(line.split()[1]): line for r in range(3) for line in rank_lines(proc.stdout, r)
              if line.startswith("FAILED")}
    assert sorted(failed) == [0, 1, 2], proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "OSError" in failed[1] and "counted in 4096-byte blocks" in failed[1]
    for r in (0, 2):
        assert "RuntimeError: tfring.data.stage: rank 1 on host h1 could not copy" in failed[r], failed[r]
        assert float(failed[r].split()[2]) < 30, failed[r]
