"""Rank 0 of an MPI job across hosts publishing its store: the file and MPI paths of `cluster.find_store`."""

import os
import threading

import pytest

from tfring.launch import cluster
from tfring.launch.engines import address_exchange


def _mpi(rank, **extra):
    env = {"OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
           "OMPI_COMM_WORLD_LOCAL_SIZE": "1", "OMPI_MCA_ess_base_jobid": "4242", "TFRING_HOST": "10.1.2.3"}
    return dict(env, **extra)


@pytest.fixture
def no_mpi4py(monkeypatch):
    monkeypatch.setattr(address_exchange, "mpi4py_installed", lambda: False)


def test_rank0_writes_its_address_and_the_others_wait_for_it(tmp_path, monkeypatch, no_mpi4py):
    monkeypatch.chdir(tmp_path)
    envs = [_mpi(r, TFRING_SECRET="s") for r in (0, 1)]
    infos = [cluster.discover(e) for e in envs]
    assert [i.exchange for i in infos] == ["file", "file"]
    results = {}
    reader = threading.Thread(target=lambda: results.update(one=cluster.find_store(infos[1], 10, envs[1])))
    reader.start()  # rank 1 is waiting before rank 0 writes
    zero = cluster.find_store(infos[0], 10, envs[0])
    reader.join(10)
    one = results["one"]
    assert (zero.store_host, zero.store_port) == (one.store_host, one.store_port)
    assert zero.store_host == "10.1.2.3" and zero.store_port > 0 and zero.job_id == one.job_id
    [written] = os.listdir(tmp_path)
    assert written.startswith(".tfring-rendezvous-")
    address_exchange._remove(str(tmp_path / written), "10.1.2.3 ")  # what rank 0 does at exit


def test_a_file_of_another_job_is_not_taken_and_the_wait_times_out(tmp_path, no_mpi4py):
    path = str(tmp_path / "rdv")
    address_exchange.write_file(path, "10.9.9.9", 1111, "other-secret")
    env = _mpi(1, TFRING_SECRET="s", TFRING_RENDEZVOUS_FILE=path)
    with pytest.raises(TimeoutError, match="rdv.*a file system they all share.*mpi4py.*TFRING_STORE_ADDR"):
        cluster.find_store(cluster.discover(env), 0.3, env)


def test_a_file_left_by_a_killed_run_with_the_same_secret_is_not_taken(tmp_path, no_mpi4py):
    path = str(tmp_path / "rdv")
    address_exchange.write_file(path, "10.9.9.9", 1111, "s")  # same secret, same path: a dead run's
    old = os.stat(path).st_mtime - 3600
    os.utime(path, (old, old))
    env = _mpi(1, TFRING_SECRET="s", TFRING_RENDEZVOUS_FILE=path)
    with pytest.raises(TimeoutError):
        cluster.find_store(cluster.discover(env), 0.3, env)
    os.utime(path)  # written now: this run's
    assert (cluster.find_store(cluster.discover(env), 5, env).store_host) == "10.9.9.9"


def test_rank0_removes_only_its_own_file(tmp_path):
    path = str(tmp_path / "rdv")
    address_exchange.write_file(path, "10.0.0.1", 1111, "s")
    address_exchange._remove(path, "10.0.0.2 2222 ")  # another job's file now: left alone
    assert os.path.exists(path)
    address_exchange._remove(path, "10.0.0.1 1111 ")
    assert not os.path.exists(path)


def test_mpich_across_hosts_without_a_job_id_says_what_to_set(no_mpi4py):
    env = {"PMI_RANK": "0", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2", "TFRING_SECRET": "s"}
    with pytest.raises(ValueError, match="names no job id.*mpi4py.*TFRING_RENDEZVOUS_FILE"):
        cluster.discover(env)
    assert cluster.discover(dict(env, TFRING_RENDEZVOUS_FILE="/shared/rdv")).exchange == "file"


def test_an_unwritable_directory_names_the_file(tmp_path, no_mpi4py):
    env = _mpi(0, TFRING_SECRET="s", TFRING_RENDEZVOUS_FILE=str(tmp_path / "missing" / "rdv"))
    with pytest.raises(ValueError, match="cannot write the rendezvous file .*missing/rdv.*TFRING_RENDEZVOUS_FILE"):
        cluster.find_store(cluster.discover(env), 1, env)


def test_without_mpi4py_or_a_secret_the_error_says_what_to_do(no_mpi4py):
    with pytest.raises(ValueError, match="TFRING_SECRET_FILE.*install mpi4py"):
        cluster.discover(_mpi(0))


class FakeWorld:
    """MPI's broadcast between two thread-ranks."""

    def __init__(self):
        self.value, self.ready = None, threading.Event()

    def bcast(self, payload, root):
        if payload is not None:
            self.value = payload
            self.ready.set()
        self.ready.wait(10)
        return self.value


def test_over_mpi_rank0_hands_out_its_address_and_a_fresh_secret(monkeypatch):
    monkeypatch.setattr(address_exchange, "mpi4py_installed", lambda: True)
    world = FakeWorld()
    monkeypatch.setattr(address_exchange, "mpi_world", lambda size: (world, False))
    envs = [_mpi(r) for r in (0, 1)]
    infos = [cluster.discover(e) for e in envs]
    assert [i.exchange for i in infos] == ["mpi", "mpi"]
    results = {}
    reader = threading.Thread(target=lambda: results.update(one=cluster.find_store(infos[1], 10, envs[1])))
    reader.start()
    zero = cluster.find_store(infos[0], 10, envs[0])
    reader.join(10)
    one = results["one"]
    assert len(zero.secret) == 64 and zero.secret == one.secret and zero.job_id == one.job_id
    assert (zero.store_host, zero.store_port) == (one.store_host, one.store_port) and zero.store_host == "10.1.2.3"


def test_mpi4py_of_another_mpi_without_a_secret_fails_clearly(monkeypatch):
    monkeypatch.setattr(address_exchange, "mpi4py_installed", lambda: True)
    monkeypatch.setattr(address_exchange, "mpi_world", lambda size: (None, False))
    env = _mpi(1)
    with pytest.raises(ValueError, match="cannot load an MPI that spans the 2 ranks"):
        cluster.find_store(cluster.discover(env), 1, env)


def test_a_named_rendezvous_file_is_used_even_with_mpi4py(monkeypatch, tmp_path):
    monkeypatch.setattr(address_exchange, "mpi4py_installed", lambda: True)
    env = _mpi(0, TFRING_SECRET="s", TFRING_RENDEZVOUS_FILE=str(tmp_path / "rdv"))
    assert cluster.discover(env).exchange == "file"
    assert cluster.discover(dict(env, TFRING_SECRET="")).exchange == "mpi"  # no secret: MPI must hand one out
