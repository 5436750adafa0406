"""Rank 0 of an MPI job across hosts publishing its store: the file and MPI paths of `cluster.find_store`."""

import hashlib
import os
import re
import socket
import tempfile
import threading
import time

import pytest

from tfring import file_safety
from tfring.launch import cluster
from tfring.launch.engines import address_exchange


def _mpi(rank, **extra):
    env = {"OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
           "OMPI_COMM_WORLD_LOCAL_SIZE": "1", "OMPI_MCA_ess_base_jobid": "4242", "TFRING_HOST": "10.1.2.3"}
    return dict(env, **extra)


@pytest.fixture
def no_mpi4py(monkeypatch):
    monkeypatch.setattr(address_exchange, "mpi4py_installed", lambda: False)


_STORE_ANSWERS = address_exchange.store_answers


@pytest.fixture(autouse=True)
def stores_answer(monkeypatch):
    """The published stores answer: these tests publish addresses no store listens at (and that
    are not this machine's: nothing may be sent there), except those that use loopback stores."""
    monkeypatch.setattr(address_exchange, "store_answers", lambda host, port, timeout=1.0: True)


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
    address_exchange.remove_published()  # what rank 0 does at exit
    assert os.listdir(tmp_path) == []


def test_a_file_of_another_job_is_not_taken_and_the_wait_times_out(tmp_path, no_mpi4py):
    path = str(tmp_path / "rdv")
    address_exchange.write_file(address_exchange.RendezvousFile(path), "10.9.9.9", 1111, "other-secret", "4242")
    env = _mpi(1, TFRING_SECRET="s", TFRING_RENDEZVOUS_FILE=path)
    with pytest.raises(TimeoutError, match="rdv.*a file system they all share.*mpi4py.*TFRING_STORE_ADDR"):
        cluster.find_store(cluster.discover(env), 0.3, env)


def test_a_file_left_by_a_killed_run_with_the_same_secret_is_not_taken(tmp_path, no_mpi4py):
    path = str(tmp_path / "rdv")
    address_exchange.write_file(address_exchange.RendezvousFile(path), "10.9.9.9", 1111, "s", "4242")  # a dead run's
    old = os.stat(path).st_mtime - 3600
    os.utime(path, (old, old))
    env = _mpi(1, TFRING_SECRET="s", TFRING_RENDEZVOUS_FILE=path)
    with pytest.raises(TimeoutError):
        cluster.find_store(cluster.discover(env), 0.3, env)
    os.utime(path)  # written now: this run's
    assert (cluster.find_store(cluster.discover(env), 5, env).store_host) == "10.9.9.9"


def test_rank0_removes_only_its_own_file(tmp_path):
    rdv = address_exchange.RendezvousFile(str(tmp_path / "rdv"))
    address_exchange.write_file(rdv, "10.0.0.1", 1111, "s", "4242")
    file_safety.write_atomically(rdv.path, b"10.0.0.2 2222 tag\n")  # another job's file now: left alone
    address_exchange.remove_published()
    assert os.path.exists(rdv.path)
    address_exchange.write_file(rdv, "10.0.0.1", 1111, "s", "4242")
    address_exchange.remove_published()
    assert not os.path.exists(rdv.path)


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


# Rendezvous from outside (issue 33, items 9 and 13): another user's port, file or folder, and a
# file left by a killed job. Ranks are threads; rank 0 starts last, so the readers are already waiting.

def _ranks(envs, timeout=20.0, rank0_delay=0.3):
    """find_store on every rank (a thread each): [(ClusterInfo or the exception, seconds it took)]."""
    out = [None] * len(envs)

    def run(i, env):
        start = time.monotonic()
        try:
            out[i] = (cluster.find_store(cluster.discover(env), timeout, env), time.monotonic() - start)
        except Exception as e:  # noqa: BLE001  (the test looks at which)
            out[i] = (e, time.monotonic() - start)

    threads = [threading.Thread(target=run, args=(i, env), daemon=True) for i, env in enumerate(envs)]
    for t in threads[1:]:
        t.start()
    time.sleep(rank0_delay)
    threads[0].start()
    for t in threads:
        t.join(timeout + 10)
    return out


def _one_host(rank, job="5151", **extra):
    env = {"OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": str(rank),
           "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_MCA_ess_base_jobid": job}
    return dict(env, **extra)


def _take_derived_port(job):
    """Another program listening on the port the job id would give (a public number)."""
    port = 20000 + int.from_bytes(hashlib.sha256(job.encode()).digest()[:4], "big") % 20000
    taken = socket.socket()
    try:
        taken.bind(("127.0.0.1", port))
        taken.listen(1)
    except OSError:
        pass  # taken already: all the better
    return taken, port


def _published_ones(results):
    infos = [r for r, _ in results]
    assert all(isinstance(i, cluster.ClusterInfo) for i in infos), infos
    assert len({(i.store_host, i.store_port, i.secret) for i in infos}) == 1, infos
    return infos[0]


def test_one_host_a_taken_derived_port_is_not_used_file(tmp_path, monkeypatch, no_mpi4py):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the node-local folder goes here
    taken, port = _take_derived_port("5151")
    with taken:
        info = _published_ones(_ranks([_one_host(r, TFRING_SECRET="s") for r in (0, 1)]))
    assert info.store_host == "127.0.0.1" and info.store_port not in (0, port)
    address_exchange.remove_published()  # what rank 0 does at exit
    assert os.listdir(tmp_path) == []


def test_one_host_a_taken_derived_port_is_not_used_mpi(monkeypatch):
    monkeypatch.setattr(address_exchange, "mpi4py_installed", lambda: True)
    world = FakeWorld()
    monkeypatch.setattr(address_exchange, "mpi_world", lambda size: (world, False))
    taken, port = _take_derived_port("5252")
    with taken:
        info = _published_ones(_ranks([_one_host(r, job="5252") for r in (0, 1)]))
    assert info.store_host == "127.0.0.1" and info.store_port not in (0, port) and len(info.secret) == 64


def _refused_at_once_on_every_rank(results, needle):
    for rank, (result, took) in enumerate(results):
        assert isinstance(result, file_safety.UnsafePathError), (rank, result)
        assert re.search(needle, str(result)) and "TFRING_RENDEZVOUS_FILE" in str(result), (rank, str(result))
        assert took < 3, f"rank {rank} took {took:.1f} s to refuse"


def test_a_rendezvous_file_another_user_owns_is_refused_on_every_rank(tmp_path, other_user, no_mpi4py):
    path = tmp_path / "rdv"
    path.write_text("10.6.6.6 6666 forged\n")
    os.chown(path, other_user.uid, other_user.gid)
    envs = [_mpi(r, TFRING_SECRET="s", TFRING_RENDEZVOUS_FILE=str(path)) for r in (0, 1)]
    _refused_at_once_on_every_rank(_ranks(envs), f"rendezvous file .*owned by {other_user.name}")
    assert os.listdir(tmp_path) == ["rdv"] and os.stat(path).st_uid == other_user.uid  # left as found, no temp


@pytest.mark.parametrize("mode", [0o1777, 0o770], ids=["1777", "770"])
def test_a_working_directory_others_can_write_is_refused_on_every_rank(tmp_path, monkeypatch, no_mpi4py, mode):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, mode)
    monkeypatch.chdir(shared)  # the default file goes into the working directory
    _refused_at_once_on_every_rank(_ranks([_mpi(r, TFRING_SECRET="s") for r in (0, 1)]),
                                   f"rendezvous folder .*{oct(mode)[2:]}.*others can write")
    assert os.listdir(shared) == []


def test_a_file_left_by_a_killed_earlier_job_is_re_read_until_this_jobs_appears(tmp_path, no_mpi4py):
    path = str(tmp_path / "rdv")
    earlier = _mpi(0, TFRING_SECRET="s", TFRING_RENDEZVOUS_FILE=path, OMPI_MCA_ess_base_jobid="1111",
                   TFRING_HOST="10.9.9.9")
    cluster.find_store(cluster.discover(earlier), 5, earlier)  # SIGKILLed after writing: its file stays
    envs = [_mpi(r, TFRING_SECRET="s", TFRING_RENDEZVOUS_FILE=path) for r in (0, 1)]
    results = _ranks(envs, rank0_delay=1.0)  # rank 1 finds the old file first
    assert _published_ones(results).store_host == "10.1.2.3"


def test_rank0_leaves_no_temporary_file_when_the_rename_fails(tmp_path, monkeypatch, no_mpi4py):
    env = _mpi(0, TFRING_SECRET="s", TFRING_RENDEZVOUS_FILE=str(tmp_path / "rdv"))

    def refuse(src, dst):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(ValueError, match="cannot write the rendezvous file"):
        cluster.find_store(cluster.discover(env), 1, env)
    assert os.listdir(tmp_path) == []


def _listening():
    """A socket listening on loopback (a live store's port)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    return server


def _closed_port():
    """A loopback port nothing listens at (a killed run's store)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("left_by", ["a killed run", "rank 0 before its store listens"])
def test_a_fresh_file_whose_store_does_not_answer_is_read_again(tmp_path, monkeypatch, left_by):
    # The same job id and secret and a file written just before this rank started: a run killed a
    # moment ago (its store is gone) or this run's rank 0 (its store not listening yet). The reader
    # waits for a store that answers at the address the file holds then, instead of trying a dead
    # store until the timeout.
    monkeypatch.setattr(address_exchange, "store_answers", _STORE_ANSWERS)
    rdv = address_exchange.RendezvousFile(str(tmp_path / "rdv"))
    first = _closed_port()
    address_exchange.write_file(rdv, "127.0.0.1", first, "s", "4242")
    found = {}
    reader = threading.Thread(target=lambda: found.update(at=address_exchange.read_file(rdv, "s", "4242", 20)))
    reader.start()
    time.sleep(0.5)
    assert reader.is_alive(), found  # a store that does not answer is not taken
    if left_by == "a killed run":
        with _listening() as store:  # this run's rank 0 writes its own file over the killed run's
            address_exchange.write_file(rdv, "127.0.0.1", store.getsockname()[1], "s", "4242")
            reader.join(10)
            assert found["at"] == ("127.0.0.1", store.getsockname()[1])
    else:
        with socket.socket() as store:  # rank 0's store starts listening at the address it wrote
            store.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            store.bind(("127.0.0.1", first))
            store.listen(8)
            reader.join(10)
            assert found["at"] == ("127.0.0.1", first)
    address_exchange.remove_published()
