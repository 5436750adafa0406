"""tfring under OpenMPI's mpirun: the job is discovered from OMPI_COMM_WORLD_* alone."""

import os
import secrets
import shutil
import subprocess
import sys

import pytest

from tfring_dev.testing import QUIET_ENV

pytestmark = [pytest.mark.multiprocess,
              pytest.mark.skipif(shutil.which("mpirun") is None,
                                 reason="mpirun is not installed (apt-get install openmpi-bin; .ci/run does)")]

SCRIPT = """
import os, sys
import numpy as np, tensorflow as tf, keras, tfring
tfring.init()
out = tfring.ops.allreduce(tf.fill([5], float(tfring.rank() + 1)), op="sum")
# One write per line: mpirun interleaves the ranks' output, and print() writes text and newline apart.
sys.stdout.write(f"MPI {tfring.rank()} {tfring.size()} {tfring.local_size()} {out.numpy().tolist()}\\n")
if os.environ.get("FIT"):  # mpirun shows every rank's stdout: the progress bar must still print once
    strategy = tfring.RingStrategy()
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
    model.fit(np.ones((64, 4)), np.ones((64, 1)), batch_size=32, epochs=2, verbose=2)
"""


def test_mpirun_two_ranks():
    cmd = ["mpirun", "-np", "2", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
           sys.executable, "-c", SCRIPT]
    env = dict(os.environ, **QUIET_ENV, FIT="1")
    env = {k: v for k, v in env.items() if not k.startswith("TFRING_")}
    env["TFRING_SECRET"] = secrets.token_hex(16)
    cmd[1:1] = ["-x", "TFRING_SECRET", "-x", "FIT"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = sorted(l for l in proc.stdout.splitlines() if l.startswith("MPI"))
    assert lines == ["MPI 0 2 2 [3.0, 3.0, 3.0, 3.0, 3.0]", "MPI 1 2 2 [3.0, 3.0, 3.0, 3.0, 3.0]"], proc.stdout
    assert sum("Epoch 1/2" in l for l in proc.stdout.splitlines()) == 1, proc.stdout


def _mpi4py_loads():
    try:
        from mpi4py import MPI  # noqa: F401
        return True
    except (ImportError, RuntimeError):
        return False


def test_mpirun_without_a_secret():
    # With mpi4py rank 0 hands a fresh secret out over MPI; without it the job refuses to start.
    cmd = ["mpirun", "-np", "2", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
           sys.executable, "-c", SCRIPT]
    env = {k: v for k, v in dict(os.environ, **QUIET_ENV).items() if not k.startswith("TFRING_")}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    if _mpi4py_loads():
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert sorted(l for l in proc.stdout.splitlines() if l.startswith("MPI")) == [
            "MPI 0 2 2 [3.0, 3.0, 3.0, 3.0, 3.0]", "MPI 1 2 2 [3.0, 3.0, 3.0, 3.0, 3.0]"], proc.stdout
    else:
        assert proc.returncode != 0
        assert "no job secret" in proc.stderr and "mpirun -x TFRING_SECRET" in proc.stderr, proc.stderr[-3000:]
        assert "install mpi4py" in proc.stderr
