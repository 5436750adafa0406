"""Finds out who this process is in the job: from `tfring run`, OpenMPI, MPICH/PMI or SLURM.

Without any launcher the job has one rank, and every collective is an identity.
"""

import dataclasses
import hashlib
import os
import re

# Set by `tfring run` for each process it starts.
RANK, SIZE = "TFRING_RANK", "TFRING_SIZE"
LOCAL_RANK, LOCAL_SIZE = "TFRING_LOCAL_RANK", "TFRING_LOCAL_SIZE"
STORE_ADDR, SECRET, JOB_ID = "TFRING_STORE_ADDR", "TFRING_SECRET", "TFRING_JOB_ID"
# The read end of a pipe only `tfring run` writes to: EOF means the launcher is gone.
LAUNCHER_FD = "TFRING_LAUNCHER_FD"
# Settings the launcher sets for ranks (declared in tfring.config; config_test checks the names agree).
ADVERTISE_HOST, HOST_ID, TIMEOUT = "TFRING_HOST", "TFRING_HOST_ID", "TFRING_TIMEOUT"
# Set by the user for jobs started by other launchers (mpirun, srun): the secret, or a file holding it.
SECRET_FILE = "TFRING_SECRET_FILE"

NO_SECRET_HELP = """this {launcher} job of {size} ranks has no job secret. Outside `tfring run`, give every rank \
the same secret in TFRING_SECRET or TFRING_SECRET_FILE (a file only its owner can read); tfring no \
longer derives one from the launcher's job id, which anyone on the network can guess. For example:
  export TFRING_SECRET=$(python -c 'import secrets; print(secrets.token_hex(32))')
  mpirun -x TFRING_SECRET -np {size} python train.py
  srun --export=ALL,TFRING_SECRET -n {size} python train.py"""


@dataclasses.dataclass
class ClusterInfo:
    """Where this process sits in the job.

    Args:
        rank, size, local_rank, local_size: position in the job and on this host.
        store_host, store_port: where rank 0 serves the rendezvous store.
        secret: the job secret that authenticates store and data connections.
        job_id: names this job's shared-memory segments and store keys.
        launcher: which launcher was found ("tfring", "openmpi", "pmi", "slurm" or "none").
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


def _int(environ, name):
    text = environ[name]
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {text!r}") from None


def _derived_port(job_key):
    """A port all ranks derive alike from a job id the launcher shares with them."""
    digest = hashlib.sha256(job_key.encode()).digest()
    return 20000 + int.from_bytes(digest[:4], "big") % 20000


def _first_host(nodelist):
    """First host of a SLURM node list such as 'gpu[01-04,07],cpu3'."""
    match = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist)
    if not match:
        return nodelist
    prefix, ranges = match.groups()
    if not ranges:
        return prefix
    first = ranges.split(",")[0].split("-")[0]
    return prefix + first


def _store_address(environ, job_key, single_host, first_host="127.0.0.1"):
    if STORE_ADDR in environ:
        host, _, port = environ[STORE_ADDR].rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"{STORE_ADDR} must look like HOST:PORT, got {environ[STORE_ADDR]!r}")
        return host, int(port)
    if not single_host and first_host == "127.0.0.1":
        raise ValueError(
            f"tfring cannot tell where rank 0 runs in this multi-host job: set {STORE_ADDR}=HOST:PORT "
            f"for every rank (e.g. mpirun -x {STORE_ADDR}=node0:29500 ...)")
    return first_host, _derived_port(job_key)


def _read_secret_file(path):
    try:
        st = os.stat(path)
        with open(path, encoding="utf-8") as f:
            secret = f.read().strip()
    except OSError as e:
        raise ValueError(f"{SECRET_FILE}: cannot read {path!r}: {e.strerror}") from None
    if st.st_mode & 0o077:
        raise ValueError(f"{SECRET_FILE} {path!r} is readable by other users (mode {st.st_mode & 0o777:o}): "
                         f"run `chmod 600 {path}`")
    if not secret:
        raise ValueError(f"{SECRET_FILE} {path!r} is empty")
    return secret


def _job_secret(env, info):
    """The secret that authenticates this job's store and data connections.

    `tfring run` makes a fresh one for each job; other launchers must be given one.
    """
    if env.get(SECRET):
        return env[SECRET]
    if env.get(SECRET_FILE):
        return _read_secret_file(env[SECRET_FILE])
    if info.size > 1 and info.launcher == "tfring":
        raise ValueError(f"{RANK} is set but neither {SECRET} nor {SECRET_FILE} is: start the job with `tfring run`")
    if info.size > 1:
        raise ValueError(NO_SECRET_HELP.format(launcher=info.launcher, size=info.size))
    return ""


def discover(environ=None):
    """Returns the `ClusterInfo` of this process.

    Looks for `tfring run`'s variables first, then OpenMPI (`OMPI_COMM_WORLD_*`), MPICH/PMI
    (`PMI_RANK`, `PMI_SIZE`), then SLURM (`SLURM_PROCID`, `SLURM_NTASKS`).

    Raises:
        ValueError: a launcher variable is malformed, a multi-host job lacks TFRING_STORE_ADDR, or a
            job of several ranks outside `tfring run` has neither TFRING_SECRET nor TFRING_SECRET_FILE.

    Example:

    >>> discover({}).size
    1
    """
    env = os.environ if environ is None else environ
    if RANK in env:
        info = ClusterInfo(rank=_int(env, RANK), size=_int(env, SIZE),
                           local_rank=_int(env, LOCAL_RANK) if LOCAL_RANK in env else 0,
                           local_size=_int(env, LOCAL_SIZE) if LOCAL_SIZE in env else 1,
                           launcher="tfring")
        if info.size > 1 and STORE_ADDR not in env:
            raise ValueError(f"{RANK} is set but {STORE_ADDR} is not: start the job with `tfring run`")
        job_key = env.get(JOB_ID, "tfring")
        single = True
        first = "127.0.0.1"
    elif "OMPI_COMM_WORLD_RANK" in env:
        info = ClusterInfo(rank=_int(env, "OMPI_COMM_WORLD_RANK"), size=_int(env, "OMPI_COMM_WORLD_SIZE"),
                           local_rank=_int(env, "OMPI_COMM_WORLD_LOCAL_RANK"),
                           local_size=_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE"), launcher="openmpi")
        job_key = env.get("OMPI_MCA_ess_base_jobid") or env.get("PMIX_NAMESPACE") or env.get("OMPI_MCA_orte_ess_jobid", "ompi")
        single = info.local_size == info.size
        first = "127.0.0.1"
    elif "PMI_RANK" in env and "PMI_SIZE" in env:
        info = ClusterInfo(rank=_int(env, "PMI_RANK"), size=_int(env, "PMI_SIZE"),
                           local_rank=_int(env, "MPI_LOCALRANKID") if "MPI_LOCALRANKID" in env else 0,
                           local_size=_int(env, "MPI_LOCALNRANKS") if "MPI_LOCALNRANKS" in env else 1,
                           launcher="pmi")
        job_key = env.get("PMI_KVSNAME") or env.get("PMIX_NAMESPACE") or "pmi"
        single = info.local_size == info.size
        first = "127.0.0.1"
    elif "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        info = ClusterInfo(rank=_int(env, "SLURM_PROCID"), size=_int(env, "SLURM_NTASKS"),
                           local_rank=_int(env, "SLURM_LOCALID") if "SLURM_LOCALID" in env else 0,
                           launcher="slurm")
        per_node = env.get("SLURM_NTASKS_PER_NODE") or env.get("SLURM_STEP_TASKS_PER_NODE", "1")
        info.local_size = int(re.match(r"\d+", per_node).group(0)) if re.match(r"\d+", per_node) else 1
        job_key = env.get("SLURM_JOB_ID", "slurm") + "." + env.get("SLURM_STEP_ID", "0")
        nodes = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or "127.0.0.1"
        single = int(env.get("SLURM_NNODES", env.get("SLURM_JOB_NUM_NODES", "1"))) == 1
        first = "127.0.0.1" if single else _first_host(nodes)
    else:
        return ClusterInfo()

    if not 0 <= info.rank < info.size:
        raise ValueError(f"rank {info.rank} is outside [0, {info.size}) ({info.launcher} variables)")
    info.secret = _job_secret(env, info)
    if info.size > 1:
        info.store_host, info.store_port = _store_address(env, job_key, single, first)
    # Names this job's shared-memory segments: unguessable, since it depends on the secret.
    info.job_id = env.get(JOB_ID) or hashlib.sha256(f"{job_key}|{info.secret}".encode()).hexdigest()[:12]
    return info
