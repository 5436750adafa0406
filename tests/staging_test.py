"""tfring.data.stage across two emulated hosts, each with its own local directory: local rank 0 of
each host copies, every rank reads the local copy, and a second job reuses it."""

import os

import numpy as np
import pytest

from multihost_test import launch, two_hosts  # noqa: F401  (two_hosts is a fixture)
from tfring.testing import rank_lines

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
    assert lines == [f"STAGED {r} {r % 2} {h} {tmp_path}/local/{h}/train 200" for r, h in enumerate(hosts)], lines
    stamps = {h: _stamps(tmp_path / "local" / h) for h in ("h0", "h1")}
    for h in ("h0", "h1"):
        assert sorted(stamps[h]) == sorted(os.listdir(tmp_path / "shared")) + ["train.staged.json"]
    again = launch(two_hosts, (2, 2), STAGE, env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert {h: _stamps(tmp_path / "local" / h) for h in ("h0", "h1")} == stamps  # nothing copied again
