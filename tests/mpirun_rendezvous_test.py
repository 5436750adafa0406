"""Rank 0's store under a real mpirun, where someone else got there first (issue 33, items 9 and 13):
a listener on the port the public job id gives, a rendezvous file a killed earlier job left."""

import os
import secrets
import shutil
import subprocess
import sys

import pytest

from tfring.launch import cluster
from tfring_dev.testing import QUIET_ENV

pytestmark = [pytest.mark.multiprocess,
              pytest.mark.skipif(shutil.which("mpirun") is None,
                                 reason="mpirun is not installed (apt-get install openmpi-bin; .ci/run does)")]

SCRIPT = """
import hashlib, os, socket, sys, time
rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
if rank == 0 and os.environ.get("TAKE_PORT"):  # another program listens where the job id points
    job = os.environ["OMPI_MCA_ess_base_jobid"]
    taken = socket.socket()
    taken.bind(("127.0.0.1", 20000 + int.from_bytes(hashlib.sha256(job.encode()).digest()[:4], "big") % 20000))
    taken.listen(1)
if rank == 0:
    time.sleep(float(os.environ.get("RANK0_DELAY", "0")))
import tensorflow as tf, tfring
tfring.init()
sys.stdout.write(f"RDV {rank} {tfring.ops.allreduce(tf.constant([rank + 1.0]), op='sum').numpy().tolist()}\\n")
"""
# Ranks that believe they run on two hosts (mpirun's local variables overridden), on this one.
TWO_HOSTS = 'OMPI_COMM_WORLD_LOCAL_SIZE=1 OMPI_COMM_WORLD_LOCAL_RANK=0 exec "$0" -c "$1"'


def _mpirun(env, exports, two_hosts=False):
    python = ["sh", "-c", TWO_HOSTS, sys.executable, SCRIPT] if two_hosts else [sys.executable, "-c", SCRIPT]
    cmd = (["mpirun", "-np", "2", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]
           + [a for k in exports for a in ("-x", k)] + python)
    base = {k: v for k, v in dict(os.environ, **QUIET_ENV).items() if not k.startswith("TFRING_")}
    return subprocess.run(cmd, capture_output=True, text=True, env=dict(base, **env), timeout=240)


def _joined(proc):
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(l for l in proc.stdout.splitlines() if l.startswith("RDV")) == ["RDV 0 [3.0]", "RDV 1 [3.0]"]


def test_one_host_a_listener_on_the_job_ids_port_does_not_fail_the_job(tmp_path):
    scratch = tmp_path / "tmp"
    scratch.mkdir(mode=0o700)
    env = {"TFRING_SECRET": secrets.token_hex(16), "TAKE_PORT": "1", "TMPDIR": str(scratch),
           "TFRING_RENDEZVOUS_TIMEOUT": "30"}
    _joined(_mpirun(env, ["TFRING_SECRET", "TAKE_PORT", "TMPDIR", "TFRING_RENDEZVOUS_TIMEOUT"]))
    assert os.listdir(scratch) == [], "rank 0 left its rendezvous folder behind"


def test_a_rendezvous_file_a_killed_job_left_is_not_taken(tmp_path):
    secret, path = secrets.token_hex(16), str(tmp_path / "rendezvous")
    earlier = {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
               "OMPI_COMM_WORLD_LOCAL_SIZE": "1", "OMPI_MCA_ess_base_jobid": "1", "TFRING_HOST": "127.0.0.1",
               "TFRING_SECRET": secret, "TFRING_RENDEZVOUS_FILE": path}
    cluster.find_store(cluster.discover(earlier), 5, earlier)  # its rank 0 was SIGKILLed: nobody listens there
    env = {"TFRING_SECRET": secret, "TFRING_RENDEZVOUS_FILE": path, "TFRING_HOST": "127.0.0.1",
           "RANK0_DELAY": "3", "TFRING_RENDEZVOUS_TIMEOUT": "20"}
    _joined(_mpirun(env, list(env), two_hosts=True))
    assert os.listdir(tmp_path) == [], "rank 0 left its rendezvous file behind"
