"""tfring under a real SLURM (Debian's slurm-wlm daemons, started per test module by
tfring_dev.slurm_cluster): srun on one node and across two emulated hosts with nothing but a secret set,
an sbatch script, and a missing secret. `make test-slurm` installs the packages and runs these."""

import os
import secrets
import subprocess
import sys
import time

import pytest

from mpirun_test import SCRIPT
from tfring_dev import emulated_hosts
from tfring_dev import slurm_cluster
from tfring_dev.slurm_cluster import leftovers
from tfring_dev.testing import QUIET_ENV

pytestmark = [pytest.mark.multiprocess, pytest.mark.slurm]

# What srun passes on: this Python's environment (TensorFlow quiet and pinned), the secret if given.
BASE = {k: v for k, v in {**os.environ, **QUIET_ENV}.items() if not k.startswith("TFRING_")}


def _cluster(hosts=None):
    try:
        return slurm_cluster.SlurmCluster(hosts).__enter__()
    except slurm_cluster.SlurmUnavailable as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def one_node():
    cluster = _cluster()
    yield cluster
    cluster.close()


@pytest.fixture(scope="module")
def two_nodes():
    ok, reason = emulated_hosts.available()
    if not ok:
        pytest.skip(reason)
    with emulated_hosts.EmulatedHosts(2) as hosts:
        cluster = _cluster(hosts)
        yield cluster
        cluster.close()


def _mpi_lines(stdout):
    return sorted(line for line in stdout.splitlines() if line.startswith("MPI"))


def test_srun_on_one_node(one_node):
    env = dict(BASE, TFRING_SECRET=secrets.token_hex(16))
    proc = one_node.srun(["-n", "2", "--export=ALL", sys.executable, "-c", SCRIPT], env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _mpi_lines(proc.stdout) == [f"MPI {r} 2 2 [3.0, 3.0, 3.0, 3.0, 3.0]" for r in range(2)], proc.stdout


@pytest.mark.emulated_hosts
def test_srun_across_two_nodes_finds_rank0_from_the_nodelist(two_nodes):
    # Nothing but the secret: rank 0's node (h0) from SLURM_STEP_NODELIST, the port from the job id.
    env = dict(BASE, TFRING_SECRET=secrets.token_hex(16))
    proc = two_nodes.srun(["-N", "2", "--ntasks-per-node", "2", "--export=ALL", sys.executable, "-c", SCRIPT], env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _mpi_lines(proc.stdout) == [f"MPI {r} 4 2 [10.0, 10.0, 10.0, 10.0, 10.0]" for r in range(4)], proc.stdout


def test_sbatch_script_runs_alone_and_its_srun_is_the_job(one_node, tmp_path):
    # The batch script itself sees SLURM_PROCID=0 and the allocation's SLURM_NTASKS=2, but is one process.
    (tmp_path / "allreduce.py").write_text(SCRIPT)
    script = f"""#!/bin/sh
{sys.executable} -c "import tfring; tfring.init(); print('ALONE', tfring.rank(), tfring.size())"
srun --export=ALL {sys.executable} {tmp_path / "allreduce.py"}
"""
    env = dict(BASE, TFRING_SECRET=secrets.token_hex(16))
    state, output = one_node.sbatch(script, ["-n", "2", "--export=ALL"], env=env)
    assert state == "COMPLETED", output[-3000:]
    assert "ALONE 0 1" in output
    assert _mpi_lines(output) == [f"MPI {r} 2 2 [3.0, 3.0, 3.0, 3.0, 3.0]" for r in range(2)], output


def test_srun_without_a_secret_says_what_to_set(one_node):
    proc = one_node.srun(["-n", "2", "--export=ALL", sys.executable, "-c", SCRIPT], env=BASE)
    assert proc.returncode != 0
    assert "no job secret" in proc.stderr and "srun --export=ALL,TFRING_SECRET" in proc.stderr, proc.stderr[-3000:]


def test_nothing_is_left_after_a_cluster_closes():
    cluster = _cluster()
    conf, directory = cluster.conf, cluster.dir
    job = subprocess.Popen(["srun", "-n", "1", "sleep", "60"], env=cluster.env)  # still running at close
    try:
        deadline = time.monotonic() + 20
        while set(cluster.node_states().values()) == {"idle"} and time.monotonic() < deadline:
            time.sleep(0.1)  # until the job holds its node
        cluster.close()
    finally:
        job.kill()
        job.wait(10)
    assert leftovers.marked_pids(conf) == [] and not os.path.exists(directory)
