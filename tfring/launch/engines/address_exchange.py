"""How rank 0 of an MPI job across hosts tells the other ranks where its store listens.

mpirun and Hydra's mpiexec say where each rank runs only to the MPI library, so rank 0 picks a
port and publishes `host port`: through MPI itself when mpi4py is installed (a broadcast, which can
also carry a fresh job secret), else through a file in the working directory, when the hosts share
it (`TFRING_RENDEZVOUS_FILE` names another path). The file is written atomically, named after the
job, tagged with a key only holders of the job secret can compute, and removed when rank 0 exits;
a reader takes only a file written after it began to wait (give or take `_CLOCK_SKEW`), so a
file a killed run left behind is not mistaken for this one's.
"""

import atexit
import hashlib
import hmac
import importlib.util
import os
import sys
import tempfile
import time

from tfring.launch import variables as v


_CLOCK_SKEW = 30.0  # seconds a rendezvous file may predate a reader's wait (hosts' clocks differ)


def mpi4py_installed():
    """Whether mpi4py can be imported here (without importing it: that would initialise MPI)."""
    return importlib.util.find_spec("mpi4py") is not None


def mpi_world(size):
    """(MPI's COMM_WORLD, whether tfring initialised MPI) through mpi4py when it loads and spans this
    job's `size` ranks, else (None, False)."""
    if not mpi4py_installed():
        return None, False
    ours = "mpi4py.MPI" not in sys.modules
    try:
        from mpi4py import MPI  # initialises MPI unless the program already did
    except (ImportError, RuntimeError):
        return None, False  # e.g. mpi4py's wheel finds no MPI library on this host
    world = MPI.COMM_WORLD
    return (world, ours) if world.Get_size() == size else (None, False)


def broadcast(world, rank, payload, finalize):
    """Rank 0's `payload` on every rank (MPI's own broadcast: a rank that dies ends the whole MPI job).

    With `finalize` (tfring initialised MPI only for this), MPI is finalised right after, so that a
    rank failing later is not held in MPI_Finalize at exit while mpirun waits for it.
    """
    value = world.bcast(payload if rank == 0 else None, root=0)
    if finalize:
        from mpi4py import MPI

        world.Barrier()
        MPI.Finalize()
    return value


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
    atexit.register(_remove, path, f"{host} {port} ")


def _remove(path, ours):
    """Removes the rendezvous file if it is still ours (a later job may have written its own)."""
    try:
        with open(path, encoding="utf-8") as f:
            if f.read().startswith(ours):
                os.unlink(path)
    except OSError:
        pass


def read_file(path, secret, timeout, poll=0.1):
    """Every other rank: waits for rank 0's file and returns (host, port).

    Raises:
        TimeoutError: no file of this job appeared within `timeout` seconds (the message names the
            file and what the ranks must share).
    """
    deadline, began = time.monotonic() + timeout, time.time()
    while True:
        try:
            with open(path, encoding="utf-8") as f:
                host, port, tag = f.read().split()
                written = os.fstat(f.fileno()).st_mtime
            if written >= began - _CLOCK_SKEW and hmac.compare_digest(tag, _tag(secret, path, host, port)):
                return host, int(port)
        except (OSError, ValueError):
            pass  # not there yet, half-written by a non-atomic file system, or another job's
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"rank 0 did not publish its address in {path!r} within {timeout:g} s: without mpi4py the ranks "
                f"of an MPI job across hosts find rank 0 through a file on a file system they all share (the "
                f"working directory, or {v.RENDEZVOUS_FILE}); install mpi4py to use MPI instead, or set "
                f"{v.STORE_ADDR}=HOST:PORT for every rank")
        time.sleep(poll)
