import os
import pathlib
import queue
import threading

import pytest

from tfring.launch import cluster
from tfring.launch.engines import address_exchange


@pytest.fixture(autouse=True)
def no_mpi4py(monkeypatch):
    """Discovery as on a machine without mpi4py, unless a test says otherwise."""
    monkeypatch.setattr(address_exchange, "mpi4py_installed", lambda: False)


def test_no_launcher_is_one_rank():
    info = cluster.discover({})
    assert (info.rank, info.size, info.launcher) == (0, 1, "none")


def test_tfring_run_variables():
    env = {"TFRING_RANK": "1", "TFRING_SIZE": "2", "TFRING_LOCAL_RANK": "1", "TFRING_LOCAL_SIZE": "2",
           "TFRING_STORE_ADDR": "10.0.0.5:2345", "TFRING_SECRET": "s3", "TFRING_JOB_ID": "j1"}
    info = cluster.discover(env)
    assert (info.rank, info.size, info.local_rank, info.local_size) == (1, 2, 1, 2)
    assert (info.store_host, info.store_port, info.secret, info.job_id) == ("10.0.0.5", 2345, "s3", "j1")


def test_openmpi_single_host_leaves_the_port_to_rank0():
    # The MPI job id is public: a port derived from it could be taken first, so rank 0 publishes a free one.
    base = {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_MCA_ess_base_jobid": "4711",
            "TFRING_SECRET": "s"}
    a = cluster.discover(dict(base, OMPI_COMM_WORLD_RANK="0", OMPI_COMM_WORLD_LOCAL_RANK="0"))
    b = cluster.discover(dict(base, OMPI_COMM_WORLD_RANK="1", OMPI_COMM_WORLD_LOCAL_RANK="1"))
    assert a.launcher == "openmpi" and (a.rank, b.rank) == (0, 1)
    assert (a.exchange, a.store_host, a.store_port) == ("file", "127.0.0.1", 0)
    assert (b.exchange, b.store_host, b.store_port) == ("file", "127.0.0.1", 0)
    given = cluster.discover(dict(base, OMPI_COMM_WORLD_RANK="0", OMPI_COMM_WORLD_LOCAL_RANK="0",
                                  TFRING_STORE_ADDR="127.0.0.1:29500"))
    assert (given.exchange, given.store_port) == ("", 29500)


MPI_4 = {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
         "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "TFRING_SECRET": "s", "OMPI_MCA_ess_base_jobid": "77"}


def test_openmpi_across_hosts_publishes_rank0s_address_in_a_file_without_mpi4py():
    info = cluster.discover(MPI_4)
    assert (info.exchange, info.store_host) == ("file", None)
    info = cluster.discover(dict(MPI_4, TFRING_STORE_ADDR="node0:29500"))
    assert (info.exchange, info.store_host, info.store_port) == ("", "node0", 29500)


def test_openmpi_with_mpi4py_publishes_over_mpi_and_needs_no_secret(monkeypatch):
    monkeypatch.setattr(address_exchange, "mpi4py_installed", lambda: True)
    assert cluster.discover(MPI_4).exchange == "mpi"
    one_host = {k: v for k, v in MPI_RANK0.items()}  # no secret, one host: MPI hands out the secret
    info = cluster.discover(one_host)
    assert (info.exchange, info.store_host, info.secret) == ("mpi", "127.0.0.1", "")


def test_pmi_variables():
    info = cluster.discover({"PMI_RANK": "2", "PMI_SIZE": "3", "MPI_LOCALRANKID": "2", "MPI_LOCALNRANKS": "3",
                             "PMI_KVSNAME": "kvs_1", "TFRING_SECRET": "s"})
    assert (info.launcher, info.rank, info.size, info.local_rank) == ("pmi", 2, 3, 2)


def test_slurm_multi_node_uses_first_node():
    env = {"SLURM_PROCID": "3", "SLURM_STEP_NUM_TASKS": "4", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
           "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_STEP_NODELIST": "gpu[07-08]", "SLURM_JOB_ID": "99",
           "SLURM_STEP_ID": "0", "TFRING_SECRET": "s"}
    info = cluster.discover(env)
    assert (info.launcher, info.rank, info.local_rank, info.local_size, info.store_host) == ("slurm", 3, 1, 2, "gpu07")
    other_step = cluster.discover(dict(env, SLURM_STEP_ID="1"))
    assert 20000 <= info.store_port < 40000 and other_step.store_port != info.store_port


def test_slurm_one_node_and_uneven_nodes():
    env = {"SLURM_PROCID": "2", "SLURM_STEP_NUM_TASKS": "3", "SLURM_LOCALID": "0", "SLURM_NODEID": "1",
           "SLURM_STEP_TASKS_PER_NODE": "2,1", "SLURM_STEP_NODELIST": "a,b", "SLURM_JOB_ID": "5",
           "SLURM_STEP_ID": "0", "TFRING_SECRET": "s"}
    assert cluster.discover(env).local_size == 1
    one = dict(env, SLURM_STEP_TASKS_PER_NODE="3", SLURM_STEP_NODELIST="a", SLURM_NODEID="0", SLURM_LOCALID="2")
    info = cluster.discover(one)
    assert (info.local_size, info.store_host) == (3, "127.0.0.1")
    with pytest.raises(ValueError, match="does not match the 2 nodes"):
        cluster.discover(dict(env, SLURM_STEP_TASKS_PER_NODE="3"))


def test_an_sbatch_script_outside_srun_is_one_process():
    # The batch script sees the allocation's SLURM_NTASKS but is a single process, not rank 0 of N.
    env = {"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_JOB_ID": "5", "SLURM_JOB_NODELIST": "a[1-2]"}
    assert (cluster.discover(env).size, cluster.discover(env).launcher) == (1, "none")


@pytest.mark.parametrize("env,needle", [
    ({"TFRING_RANK": "x", "TFRING_SIZE": "2"}, "TFRING_RANK"),
    ({"TFRING_RANK": "2", "TFRING_SIZE": "2", "TFRING_STORE_ADDR": "h:1"}, "outside"),
    ({"TFRING_RANK": "0", "TFRING_SIZE": "2"}, "tfring run"),
    ({"TFRING_RANK": "0", "TFRING_SIZE": "2", "TFRING_STORE_ADDR": "nohost", "TFRING_SECRET": "s"}, "HOST:PORT"),
    ({"TFRING_RANK": "0", "TFRING_SIZE": "2", "TFRING_STORE_ADDR": "h:1"}, "TFRING_SECRET.*tfring run"),
])
def test_bad_launcher_variables(env, needle):
    with pytest.raises(ValueError, match=needle):
        cluster.discover(env)


MPI_RANK0 = {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
             "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_MCA_ess_base_jobid": "4711"}


@pytest.mark.parametrize("env", [
    MPI_RANK0,
    {"PMI_RANK": "0", "PMI_SIZE": "2", "PMI_KVSNAME": "kvs_1"},
    {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "99", "SLURM_STEP_ID": "0",
     "SLURM_STEP_NODELIST": "a", "SLURM_STEP_TASKS_PER_NODE": "2"},
    {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "a", "MASTER_PORT": "1234"},
])
def test_a_job_outside_tfring_run_needs_a_secret(env):
    # The secret used to be derived from the launcher's job id, which anyone can enumerate.
    with pytest.raises(ValueError) as e:
        cluster.discover(env)
    for needle in ("TFRING_SECRET", "TFRING_SECRET_FILE", "mpirun -x TFRING_SECRET", "srun"):
        assert needle in str(e.value)


def test_one_rank_needs_no_secret():
    env = dict(MPI_RANK0, OMPI_COMM_WORLD_SIZE="1", OMPI_COMM_WORLD_LOCAL_SIZE="1")
    assert cluster.discover(env).size == 1


def test_secret_from_the_environment_and_the_job_id_depends_on_it():
    a = cluster.discover(dict(MPI_RANK0, TFRING_SECRET="one", TFRING_STORE_ADDR="127.0.0.1:29500"))
    b = cluster.discover(dict(MPI_RANK0, TFRING_SECRET="two", TFRING_STORE_ADDR="127.0.0.1:29500"))
    assert (a.secret, b.secret) == ("one", "two")
    assert a.job_id != b.job_id  # shared-memory names cannot be guessed from the launcher's job id


def test_secret_file_must_be_private(tmp_path):
    path = tmp_path / "secret"
    path.write_text("s3cr3t\n")
    path.chmod(0o600)
    assert cluster.discover(dict(MPI_RANK0, TFRING_SECRET_FILE=str(path))).secret == "s3cr3t"
    path.chmod(0o644)
    with pytest.raises(ValueError, match="readable by other users.*chmod 600"):
        cluster.discover(dict(MPI_RANK0, TFRING_SECRET_FILE=str(path)))
    path.chmod(0o600)
    path.write_text("  \n")
    with pytest.raises(ValueError, match="empty"):
        cluster.discover(dict(MPI_RANK0, TFRING_SECRET_FILE=str(path)))
    with pytest.raises(ValueError, match="cannot read"):
        cluster.discover(dict(MPI_RANK0, TFRING_SECRET_FILE=str(tmp_path / "missing")))


@pytest.mark.parametrize("kind", ["fifo", "device", "folder", "too_large"])
def test_a_secret_file_that_is_no_small_regular_file_is_refused_at_once(tmp_path, kind):
    # A FIFO nobody writes would block the read; /dev/zero would read without end.
    path = tmp_path / "secret"
    if kind == "fifo":
        os.mkfifo(path, 0o600)
    elif kind == "device":
        path = pathlib.Path("/dev/zero")
    elif kind == "folder":
        path.mkdir(mode=0o700)
    else:
        path.write_bytes(b"x" * 100_000)
        path.chmod(0o600)
    outcome = queue.Queue()

    def read():
        try:
            outcome.put(cluster.read_secret_file(str(path)))
        except ValueError as e:
            outcome.put(e)

    threading.Thread(target=read, daemon=True).start()
    error = outcome.get(timeout=5)  # a hang fails here
    assert isinstance(error, ValueError), error
    expected = "100000 bytes" if kind == "too_large" else "not a regular file"
    assert expected in str(error) and str(path) in str(error), error
