"""Finds out who this process is in the job, from the variables of the engine that started it.

Engines are asked in order (`ENGINES`), the first that recognises its variables describes the
job: `tfring run`, OpenMPI, MPICH/PMI, SLURM, the torchrun-style variables (PyTorchJob, JobSet,
torchrun), TF_CONFIG (TFJob), a Kubernetes Indexed Job. Without any the job has one rank, and
every collective is an identity. `TFRING_STORE_ADDR` overrides where rank 0's store is.
"""

import dataclasses
import hashlib
import os
import secrets as _secrets
import stat

from tfring.file_safety import UnsafePathError
from tfring.launch import addresses
from tfring.launch.engines import (address_exchange, indexed_job, mpich, openmpi, slurm, tf_config, tfring_run,
                                   torchrun)
from tfring.launch.engines.placement import host_port
from tfring.launch.variables import (ADVERTISE_HOST, HOST_ID, JOB_ID, LAUNCHER_FD, LOCAL_RANK, LOCAL_SIZE,  # noqa: F401
                                     RANK, RENDEZVOUS_FILE, SECRET, SECRET_FILE, SIZE, STORE_ADDR, TIMEOUT)

# The order engines are asked in: the launcher a user typed wins over the scheduler around it.
ENGINES = (tfring_run, openmpi, mpich, slurm, torchrun, tf_config, indexed_job)
# Engines whose ranks can reach each other through MPI (mpi4py) before tfring's store exists.
_MPI_ENGINES = (openmpi.NAME, mpich.NAME)

NO_SECRET_HELP = """this {launcher} job of {size} ranks has no job secret. Outside `tfring run`, give every rank \
the same secret in TFRING_SECRET or TFRING_SECRET_FILE (a file only its owner can read){mpi}; tfring \
does not derive one from the launcher's job id, which anyone on the network can guess. For example:
  export TFRING_SECRET=$(python -c 'import secrets; print(secrets.token_hex(32))')
  mpirun -x TFRING_SECRET -np {size} python train.py
  srun --export=ALL,TFRING_SECRET -n {size} python train.py
(on Kubernetes: the same value in every pod, from a Secret; see examples/kubernetes/)"""


@dataclasses.dataclass
class ClusterInfo:
    """Where this process sits in the job.

    Args:
        rank, size, local_rank, local_size: position in the job and on this host.
        store_host, store_port: where rank 0 serves the rendezvous store (host None, port 0 until
            `find_store` when rank 0 must publish them).
        secret: the job secret that authenticates store and data connections.
        job_id: names this job's shared-memory segments and store keys.
        launcher: which engine's variables were read ("tfring", "openmpi", "pmi", "slurm",
            "torchrun", "tf_config", "indexed_job" or "none").
        exchange: "" when everything is known; "mpi" or "file" when rank 0 still has to publish
            its store (and, over MPI, maybe a fresh secret): `find_store` does it.
        job_key: what every rank of the job reads alike (the engine's job id).
    """

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1
    store_host: str = "127.0.0.1"
    store_port: int = 0
    secret: str = ""
    job_id: str = "single"
    launcher: str = "none"
    exchange: str = ""
    job_key: str = ""


def _derived_port(job_key):
    """A port all ranks derive alike from a job id the launcher shares with them."""
    digest = hashlib.sha256(job_key.encode()).digest()
    return 20000 + int.from_bytes(digest[:4], "big") % 20000


def _store(env, placement):
    """Rank 0's store as (host, port): port 0 when rank 0 must publish it, None when the host too."""
    if STORE_ADDR in env:
        return host_port(env[STORE_ADDR], STORE_ADDR)
    if placement.store:
        return placement.store
    if placement.engine in _MPI_ENGINES:
        # An MPI job id is public: a port derived from it could be taken first by anyone on the host.
        return ("127.0.0.1", 0) if placement.local_size == placement.size else None
    if placement.local_size == placement.size:
        return "127.0.0.1", _derived_port(placement.job_key)
    if placement.rank0_host:
        return placement.rank0_host, _derived_port(placement.job_key)
    return None


SECRET_FILE_MAX_BYTES = 4096  # a secret is one line; anything larger is not one


def read_secret_file(path):
    """The job secret in the file `path` (TFRING_SECRET_FILE).

    The file is opened without blocking and checked before it is read: a regular file (a FIFO
    nobody writes would block the read, a device such as /dev/zero would never end), owned by this
    user (or root, as a mounted secret is), readable by its owner only, of at most
    `SECRET_FILE_MAX_BYTES`.

    Args:
        path: a file only its owner can read.

    Returns:
        The secret, stripped.

    Raises:
        ValueError: the file cannot be read, is no regular file, is another user's, others can
            read it, is too large or is empty (the message says which, and how to fix it).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise ValueError(f"{SECRET_FILE}: cannot read {path!r}: {e.strerror}") from None
    try:
        _check_secret_file(path, os.fstat(fd))
        data = os.read(fd, SECRET_FILE_MAX_BYTES)
    except OSError as e:
        raise ValueError(f"{SECRET_FILE}: cannot read {path!r}: {e.strerror}") from None
    finally:
        os.close(fd)
    secret = data.decode("utf-8", errors="replace").strip()
    if not secret:
        raise ValueError(f"{SECRET_FILE} {path!r} is empty")
    return secret


def _check_secret_file(path, st):
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{SECRET_FILE} {path!r} is not a regular file ({stat.filemode(st.st_mode)}): "
                         f"name a file that holds the secret")
    if st.st_uid not in (os.geteuid(), 0):
        raise ValueError(f"{SECRET_FILE} {path!r} belongs to user id {st.st_uid}, not to this user "
                         f"({os.geteuid()}): use a file of your own")
    if st.st_mode & 0o077:
        raise ValueError(f"{SECRET_FILE} {path!r} is readable by other users (mode {st.st_mode & 0o777:o}): "
                         f"run `chmod 600 {path}`")
    if st.st_size > SECRET_FILE_MAX_BYTES:
        raise ValueError(f"{SECRET_FILE} {path!r} holds {st.st_size} bytes: a secret is one line of at most "
                         f"{SECRET_FILE_MAX_BYTES} bytes")


def _given_secret(env):
    """The secret the user gave (TFRING_SECRET, then TFRING_SECRET_FILE), or ""."""
    if env.get(SECRET):
        return env[SECRET]
    if env.get(SECRET_FILE):
        return read_secret_file(env[SECRET_FILE])
    return ""


def _exchange(env, info, store):
    """How rank 0 will publish what the ranks cannot know from the engine ("" when nothing): over
    MPI when mpi4py is there and must hand out a secret, or the job spans hosts and the user named
    no rendezvous file; else through a file (on one host a node-local one: no MPI to initialise)."""
    missing_secret = info.size > 1 and not info.secret
    if store is not None and store[1] and not missing_secret:
        return ""
    spans_hosts = info.local_size < info.size
    if (info.launcher in _MPI_ENGINES and address_exchange.mpi4py_installed()
            and (missing_secret or (spans_hosts and not env.get(RENDEZVOUS_FILE)))):
        return "mpi"
    if missing_secret and info.launcher == "tfring":
        raise ValueError(f"{RANK} is set but neither {SECRET} nor {SECRET_FILE} is: start the job with `tfring run`")
    if missing_secret:
        mpi = ", or install mpi4py so that rank 0 can hand one out" if info.launcher in _MPI_ENGINES else ""
        raise ValueError(NO_SECRET_HELP.format(launcher=info.launcher, size=info.size, mpi=mpi))
    if not info.job_key and not env.get(RENDEZVOUS_FILE):
        raise ValueError(f"this {info.launcher} job spans hosts but names no job id to find rank 0's address by: "
                         f"install mpi4py, or set {RENDEZVOUS_FILE} (a path every host shares) or "
                         f"{STORE_ADDR}=HOST:PORT for every rank")
    return "file"


def discover(environ=None):
    """Returns the `ClusterInfo` of this process, from the first engine in `ENGINES` that recognises
    the environment.

    Args:
        environ: the variables to read; None means `os.environ`.

    Raises:
        ValueError: an engine's variable is malformed, or a job of several ranks outside `tfring run`
            has no secret (TFRING_SECRET, TFRING_SECRET_FILE, or mpi4py under MPI).

    Example:

    >>> discover({}).size
    1
    """
    env = os.environ if environ is None else environ
    engine = next((e for e in ENGINES if e.detect(env)), None)
    if engine is None:
        return ClusterInfo()
    p = engine.read(env)
    if not 0 <= p.rank < p.size:
        raise ValueError(f"rank {p.rank} is outside [0, {p.size}) ({p.engine} variables)")
    if not 0 <= p.local_rank < p.local_size:
        raise ValueError(f"local rank {p.local_rank} is outside [0, {p.local_size}) ({p.engine} variables)")
    info = ClusterInfo(rank=p.rank, size=p.size, local_rank=p.local_rank, local_size=p.local_size,
                       launcher=p.engine, job_key=p.job_key, secret=_given_secret(env))
    if info.size == 1:
        return _with_job_id(env, info)
    store = _store(env, p)
    info.exchange = _exchange(env, info, store)
    info.store_host, info.store_port = store or (None, 0)
    return info if info.exchange else _with_job_id(env, info)


def _with_job_id(env, info):
    # Names this job's shared-memory segments: unguessable, since it depends on the secret.
    info.job_id = env.get(JOB_ID) or hashlib.sha256(f"{info.job_key}|{info.secret}".encode()).hexdigest()[:12]
    return info


def _rank0_offer(env, info):
    """What rank 0 publishes: its store (the known host, else its advertised address; a free port) and the secret."""
    host = info.store_host or env.get(ADVERTISE_HOST) or addresses.default_address()
    return host, info.store_port or addresses.free_port(""), info.secret or _secrets.token_hex(32)


def find_store(info, timeout, environ=None):
    """Completes `info` where rank 0 must publish its store address (under MPI) or a secret.

    Rank 0 picks a free port (an MPI job id is public, so a port derived from it could be taken).
    Over MPI (mpi4py installed) rank 0 broadcasts both; else it writes its address to a file (on
    one host a node-local one, across hosts one in the shared working directory; see
    `engines.address_exchange`) and the others wait for it.

    Args:
        info: what `discover` returned.
        timeout: seconds the other ranks wait for rank 0's file.
        environ: the variables to read; None means `os.environ`.

    Returns:
        `info`, with the store address, secret and job id filled in.

    Raises:
        TimeoutError: rank 0's file did not appear in time.
        UnsafePathError: the file or its folder is another user's or writable by others (on
            every rank, at once).
        ValueError: the file cannot be written.
    """
    env = os.environ if environ is None else environ
    if not info.exchange:
        return info
    world, ours = address_exchange.mpi_world(info.size) if info.exchange == "mpi" else (None, False)
    if world is not None:
        offer = _rank0_offer(env, info) if info.rank == 0 else None
        info.store_host, info.store_port, info.secret = address_exchange.broadcast(world, info.rank, offer, ours)
    elif not info.secret:
        raise ValueError(f"mpi4py is installed but cannot load an MPI that spans the {info.size} ranks of "
                         f"this {info.launcher} job (is it built for another MPI?), and no secret is set: "
                         + NO_SECRET_HELP.format(launcher=info.launcher, size=info.size, mpi=""))
    else:
        _exchange_file(env, info, timeout)
    info.exchange = ""
    return _with_job_id(env, info)


def _exchange_file(env, info, timeout):
    """Rank 0 writes its store address to the job's rendezvous file; the others wait for it."""
    rdv = address_exchange.locate(env, info.job_key, info.secret, info.local_size == info.size)
    try:
        if info.rank == 0:
            info.store_host, info.store_port, _ = _rank0_offer(env, info)
            address_exchange.write_file(rdv, info.store_host, info.store_port, info.secret, info.job_key)
        else:
            info.store_host, info.store_port = address_exchange.read_file(rdv, info.secret, info.job_key, timeout)
    except UnsafePathError as e:
        raise UnsafePathError(f"rank {info.rank}: {e}") from None
