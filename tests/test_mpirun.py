"""tfring under OpenMPI's mpirun: the job is discovered from OMPI_COMM_WORLD_* alone."""

import os
import secrets
import shutil
import subprocess
import sys

import pytest

from tfring.testing import QUIET_ENV

pytestmark = pytest.mark.skipif(shutil.which("mpirun") is None,
                                reason="mpirun is not installed (apt-get install openmpi-bin; .ci/run does)")

SCRIPT = """
import tensorflow as tf, tfring
tfring.init()
out = tfring.ops.allreduce(tf.fill([5], float(tfring.rank() + 1)), op="sum")
print("MPI", tfring.rank(), tfring.size(), tfring.local_size(), out.numpy().tolist())
"""


def test_mpirun_two_ranks():
    cmd = ["mpirun", "-np", "2", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
           sys.executable, "-c", SCRIPT]
    env = dict(os.environ, **QUIET_ENV)
    env = {k: v for k, v in env.items() if not k.startswith("TFRING_")}
    env["TFRING_SECRET"] = secrets.token_hex(16)
    cmd[1:1] = ["-x", "TFRING_SECRET"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = sorted(l for l in proc.stdout.splitlines() if l.startswith("MPI"))
    assert lines == ["MPI 0 2 2 [3.0, 3.0, 3.0, 3.0, 3.0]", "MPI 1 2 2 [3.0, 3.0, 3.0, 3.0, 3.0]"], proc.stdout


def test_mpirun_without_a_secret_refuses_to_start():
    cmd = ["mpirun", "-np", "2", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
           sys.executable, "-c", SCRIPT]
    env = {k: v for k, v in dict(os.environ, **QUIET_ENV).items() if not k.startswith("TFRING_")}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode != 0
    assert "no job secret" in proc.stderr and "mpirun -x TFRING_SECRET" in proc.stderr, proc.stderr[-3000:]
