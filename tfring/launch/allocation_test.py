"""PBS and LSF allocations: `tfring run` with no -H reads them, and `--hostfile $PBS_NODEFILE` works."""

import subprocess
import sys

import pytest

from tfring.launch import allocation, hosts
from tfring.launch.hosts import Host


def test_pbs_nodefile_lists_each_host_once_per_slot(tmp_path):
    nodefile = tmp_path / "nodefile"
    nodefile.write_text("node07\nnode07\nnode07\nnode08\nnode08\nnode08\n")
    expected = [Host("node07", 3), Host("node08", 3)]
    assert hosts.read_hostfile(str(nodefile)) == expected  # tfring run --hostfile $PBS_NODEFILE
    assert allocation.allocation_hosts({"PBS_NODEFILE": str(nodefile)}) == (expected, "PBS_NODEFILE")


def test_a_host_given_slots_cannot_be_named_again(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("a slots=2\na\n")
    with pytest.raises(ValueError, match="'a' is listed twice"):
        hosts.read_hostfile(str(path))


def test_lsf_variables():
    assert allocation.allocation_hosts({"LSB_MCPU_HOSTS": "hostA 4 hostB 2"}) == (
        [Host("hostA", 4), Host("hostB", 2)], "LSB_MCPU_HOSTS")
    assert allocation.allocation_hosts({"LSB_HOSTS": "hostA hostA hostB"}) == (
        [Host("hostA", 2), Host("hostB", 1)], "LSB_HOSTS")
    assert allocation.allocation_hosts({}) == (None, None)
    for env, needle in [({"LSB_MCPU_HOSTS": "hostA 4 hostB"}, "pairs"), ({"LSB_MCPU_HOSTS": "hostA x"}, "whole number"),
                        ({"LSB_MCPU_HOSTS": "a 1 a 2"}, "listed twice"), ({"PBS_NODEFILE": "/nonexistent"}, "cannot read")]:
        with pytest.raises(ValueError, match=needle):
            allocation.allocation_hosts(env)


@pytest.mark.multiprocess
def test_tfring_run_inside_an_allocation_uses_its_hosts(tmp_path):
    # An LSF allocation of this host with 2 slots: `tfring run` with neither -np nor -H starts 2 ranks.
    env = {"LSB_MCPU_HOSTS": "localhost 2", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-m", "tfring", "run", "--all-output", sys.executable, "-c",
                           "import os; print(os.environ['TFRING_RANK'], os.environ['TFRING_SIZE'])"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.split("\n")[:2]) == ["[0] 0 2", "[1] 1 2"], proc.stdout
    assert "using the hosts of this job's allocation (LSB_MCPU_HOSTS): localhost:2" in proc.stderr
