"""How rank 0 of an MPI job tells the other ranks where its store listens.

mpirun and Hydra's mpiexec say where each rank runs only to the MPI library, and their job ids
are public, so a port derived from one could be taken first by anyone on the host. Rank 0 binds a
free port instead and publishes `host port`: through MPI itself when mpi4py is installed and must
hand out a secret (or the job spans hosts), a broadcast that also carries a fresh job secret; else
through a file. On one host the file sits in a folder of the temporary directory named from the
job and its secret; across hosts it sits in the working directory, when the hosts share it
(`TFRING_RENDEZVOUS_FILE` names another path).

The folder must be this user's and writable by nobody else, and a file already at the path must be
this user's too: else every rank refuses it at once, naming owner and mode. The file is written
atomically, tagged with the job id under a key only holders of the job secret can compute, and
removed when rank 0 exits. A file that another job or a killed run of this one left behind (another
job id, or written before this process started, give or take `_CLOCK_SKEW`) is not taken: readers
re-read until rank 0's own appears or `timeout` ends. Nor is one whose store does not answer: a run
killed just before this one started (same job id and secret, a file too fresh for the clock to
tell) left it, or rank 0's store is not listening yet; either way the reader reads again and tries
again until a store answers at the address the file then holds (rank 0 replaces a killed run's
file with its own).
"""

import atexit
import dataclasses
import hashlib
import hmac
import importlib.util
import os
import socket
import sys
import tempfile
import time

from tfring import file_safety
from tfring.launch import variables as v


_CLOCK_SKEW = 30.0  # seconds a rendezvous file may predate a reader's start (hosts' clocks differ)
_FOLDER, _FILE = "rendezvous folder", "rendezvous file"
_INSTEAD = (f"set {v.RENDEZVOUS_FILE} to a path in a folder only you can write (on a file system every host "
            f"shares), install mpi4py, or set {v.STORE_ADDR}=HOST:PORT for every rank")
_published = []  # (RendezvousFile, text) this process wrote: removed at exit


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


@dataclasses.dataclass(frozen=True)
class RendezvousFile:
    """Where rank 0 publishes its address.

    Args:
        path: the file.
        own_folder: whether rank 0 makes its folder for this job (and removes it with the file),
            rather than writing into a folder that exists.
    """

    path: str
    own_folder: bool = False


def locate(environ, job_key, secret, one_host):
    """The `RendezvousFile` of this job.

    Args:
        environ: the variables to read (`TFRING_RENDEZVOUS_FILE` names the file).
        job_key: the launcher's job id, the same on every rank.
        secret: the job secret: on one host it names the folder, so no other user can foresee it.
        one_host: whether every rank runs on this host.

    Returns:
        `TFRING_RENDEZVOUS_FILE`; else on one host `<tmp>/.tfring-rendezvous-<job and secret>/address`;
        else `.tfring-rendezvous-<job>` in the working directory.

    Example:

    >>> locate({"TFRING_RENDEZVOUS_FILE": "/shared/rdv"}, "42", "s", False).path
    '/shared/rdv'
    """
    if environ.get(v.RENDEZVOUS_FILE):
        return RendezvousFile(environ[v.RENDEZVOUS_FILE])
    if one_host:
        name = ".tfring-rendezvous-" + hashlib.sha256(f"{job_key}|{secret}".encode()).hexdigest()[:20]
        return RendezvousFile(os.path.join(tempfile.gettempdir(), name, "address"), own_folder=True)
    name = ".tfring-rendezvous-" + hashlib.sha256(job_key.encode()).hexdigest()[:16]
    return RendezvousFile(os.path.join(os.getcwd(), name))


def _record(secret, job_key, host, port):
    tag = hmac.new(secret.encode(), f"tfring-rendezvous|{job_key}|{host}|{port}".encode(), "sha256").hexdigest()
    return f"{host} {port} {tag}\n"


def _check(rdv, make_folder=False):
    """Refuses (at once, on every rank) a folder or file at `rdv` that another user owns or can write.

    Raises:
        UnsafePathError: what is wrong and what to do instead.
        FileNotFoundError: the folder does not exist (yet).
    """
    folder = os.path.dirname(os.path.abspath(rdv.path))
    try:
        if make_folder:
            file_safety.make_private_dir(folder, _FOLDER)
        else:
            file_safety.check_private_dir(folder, _FOLDER)
    except file_safety.UnsafePathError as e:
        raise file_safety.UnsafePathError(f"{e}. Or {_INSTEAD}") from None
    try:
        if os.path.lexists(rdv.path):
            file_safety.check_own_file(rdv.path, _FILE)
    except file_safety.UnsafePathError as e:
        raise file_safety.UnsafePathError(f"{e}: tfring neither takes nor replaces it; remove it if it is "
                                          f"yours, or {_INSTEAD}") from None


def write_file(rdv, host, port, secret, job_key):
    """Rank 0: publishes `host port` in `rdv` atomically; it is removed when this process exits.

    Args:
        rdv: the `RendezvousFile`.
        host, port: where rank 0's store listens.
        secret: the job secret, which keys the file's tag.
        job_key: the launcher's job id: readers take only a file of their own job.

    Raises:
        UnsafePathError: the folder, or a file at the path, is another user's or writable by others.
        ValueError: the folder is missing or cannot be written (the message names the file).
    """
    text = _record(secret, job_key, host, port)
    try:
        _check(rdv, make_folder=rdv.own_folder)
        file_safety.write_atomically(rdv.path, text.encode())  # its temporary name is removed if this fails
    except file_safety.UnsafePathError:
        raise
    except OSError as e:
        raise ValueError(f"rank 0 cannot write the rendezvous file {rdv.path!r}: {e.strerror}; {_INSTEAD}") from None
    if not _published:
        atexit.register(remove_published)
    _published.append((rdv, text))


def remove_published():
    """Removes the rendezvous files this process published (and the folders it made for them), each
    only while it still holds what this process wrote (a later job may have written its own).

    Example:

    >>> remove_published()  # at exit; nothing to do in a process that published nothing
    """
    while _published:
        rdv, text = _published.pop()
        try:
            with open(rdv.path, encoding="utf-8") as f:
                if f.read() == text:
                    os.unlink(rdv.path)
            if rdv.own_folder:
                os.rmdir(os.path.dirname(os.path.abspath(rdv.path)))
        except OSError:
            pass


def _process_start():
    """When this process started, on the wall clock (now where /proc cannot tell)."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat", encoding="ascii") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return time.time()


def _look(rdv, secret, job_key, since):
    """(host, port) from this job's file, else (None, what was found instead).

    Raises:
        UnsafePathError: the folder or the file is another user's or writable by others.
    """
    try:
        _check(rdv)
        with open(rdv.path, encoding="utf-8") as f:  # a regular file of ours, in a folder only we can write
            text, written = f.read(), os.fstat(f.fileno()).st_mtime
    except file_safety.UnsafePathError:
        raise
    except FileNotFoundError:
        folder = os.path.dirname(os.path.abspath(rdv.path))
        return None, "no file yet" if rdv.own_folder or os.path.isdir(folder) else f"no folder {folder!r}"
    except OSError as e:
        return None, f"a file it cannot read ({e.strerror})"
    host, _, rest = text.partition(" ")
    port = rest.partition(" ")[0]
    if not port.isdigit() or not hmac.compare_digest(text.encode(), _record(secret, job_key, host, int(port)).encode()):
        return None, "only another job's file, or a killed run's"
    if written < since:
        return None, "only a file of this job written before this rank started: a killed run's"
    return (host, int(port)), ""


def store_answers(host, port, timeout=1.0):
    """Whether something listens at `host:port` (a TCP connection opens; it is closed at once).

    Args:
        host, port: the address a rendezvous file holds.
        timeout: seconds to wait for the connection.

    Returns:
        bool.

    Example:

    >>> store_answers("127.0.0.1", 29500)
    False
    """
    try:
        socket.create_connection((host, port), timeout=timeout).close()
        return True
    except OSError:
        return False


def read_file(rdv, secret, job_key, timeout, poll=0.1):
    """Every other rank: waits for rank 0's file of this job and returns (host, port).

    A file of another job, one written before this process started, or one whose store does not
    answer, is read again until rank 0's own replaces it and its store answers.

    Args:
        rdv: the `RendezvousFile`.
        secret: the job secret.
        job_key: the launcher's job id.
        timeout: seconds to wait.
        poll: seconds between reads.

    Raises:
        UnsafePathError: the folder or the file is another user's or writable by others (at once).
        TimeoutError: no file of this job appeared within `timeout` seconds (the message names the
            file, what was found, and what the ranks must share).
    """
    deadline, since = time.monotonic() + timeout, _process_start() - _CLOCK_SKEW
    while True:
        found, instead = _look(rdv, secret, job_key, since)
        if found and store_answers(*found):
            return found
        if found:
            instead = (f"only a file of this job whose store at {found[0]}:{found[1]} did not answer: a run killed "
                       "just before this one left it, or rank 0 stopped before its store listened")
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"rank 0 did not publish its address in {rdv.path!r} within {timeout:g} s (found {instead}): "
                "either rank 0 failed before (see its output), or the ranks do not share this file: without "
                f"mpi4py the ranks of an MPI job find rank 0 through a file on a file system they all share "
                f"(the working directory, or {v.RENDEZVOUS_FILE}); install mpi4py to use MPI instead, or set "
                f"{v.STORE_ADDR}=HOST:PORT for every rank")
        time.sleep(poll)
