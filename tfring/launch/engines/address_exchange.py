"""How rank 0 of an MPI job across hosts tells the other ranks where its store listens.

mpirun and Hydra's mpiexec say where each rank runs only to the MPI library, so rank 0 picks a
port and publishes `host port`: through MPI itself when mpi4py is installed (a broadcast, which can
also carry a fresh job secret), else through a file in the working directory, which the ranks
share as mpirun assumes (`TFRING_RENDEZVOUS_FILE` names another). The file is written atomically,
is named after the job, carries a tag keyed by the job secret (so a file left by another job is
never taken for this one's) and is removed when rank 0 exits.
"""

import atexit
import hashlib
import hmac
import importlib.util
import os
import tempfile
import time

from tfring.launch import variables as v


def mpi_world(size):
    """MPI's COMM_WORLD through mpi4py when it loads and spans this job's `size` ranks, else None."""
    if importlib.util.find_spec("mpi4py") is None:
        return None
    try:
        from mpi4py import MPI  # initialises MPI: only ever imported here, and only when needed
    except (ImportError, RuntimeError):
        return None  # e.g. mpi4py's wheel finds no MPI library on this host
    world = MPI.COMM_WORLD
    return world if world.Get_size() == size else None


def broadcast(world, rank, payload):
    """Rank 0's `payload` on every rank (MPI's own broadcast: a rank that dies ends the whole MPI job)."""
    return world.bcast(payload if rank == 0 else None, root=0)


def file_path(environ, job_key):
    """Where rank 0 writes its address: TFRING_RENDEZVOUS_FILE, or a file named after the job in the
    working directory."""
    if environ.get(v.RENDEZVOUS_FILE):
        return environ[v.RENDEZVOUS_FILE]
    return os.path.join(os.getcwd(), ".tfring-rendezvous-" + hashlib.sha256(job_key.encode()).hexdigest()[:16])


def _tag(secret, path, host, port):
    return hmac.new(secret.encode(), f"{path}|{host}|{port}".encode(), "sha256").hexdigest()


def write_file(path, host, port, secret):
    """Rank 0: writes `host port tag` to `path` atomically and removes it when this process exits.

    Raises:
        ValueError: the directory cannot be written (the message names it).
    """
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".tfring-rendezvous-", dir=directory)
        with os.fdopen(fd, "w") as f:
            f.write(f"{host} {port} {_tag(secret, path, host, port)}\n")
        os.replace(tmp, path)
    except OSError as e:
        raise ValueError(f"rank 0 cannot write the rendezvous file {path!r}: {e.strerror}; set "
                         f"{v.RENDEZVOUS_FILE} to a path on a file system every host shares, or "
                         f"{v.STORE_ADDR}=HOST:PORT for every rank") from None
    atexit.register(_remove, path)


def _remove(path):
    try:
        os.unlink(path)
    except OSError:
        pass


def read_file(path, secret, timeout, poll=0.1):
    """Every other rank: waits for rank 0's file and returns (host, port).

    Raises:
        TimeoutError: no file of this job appeared within `timeout` seconds (the message names the
            file and what the ranks must share).
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            with open(path, encoding="utf-8") as f:
                host, port, tag = f.read().split()
            if hmac.compare_digest(tag, _tag(secret, path, host, port)):
                return host, int(port)
        except (OSError, ValueError):
            pass  # not there yet, half-written by a non-atomic file system, or another job's
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"rank 0 did not publish its address in {path!r} within {timeout:g} s: the ranks of an MPI "
                f"job across hosts must share the working directory (or {v.RENDEZVOUS_FILE}); install "
                f"mpi4py to use MPI instead, or set {v.STORE_ADDR}=HOST:PORT for every rank")
        time.sleep(poll)
