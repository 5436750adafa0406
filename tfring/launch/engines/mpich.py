"""MPICH's and Intel MPI's Hydra `mpiexec` (the PMI interface): PMI_RANK, PMI_SIZE, MPI_LOCALRANKID."""

import os

from tfring.launch.engines.placement import Placement, integer

NAME = "pmi"


def detect(environ):
    """Whether a Hydra `mpiexec` (MPICH, Intel MPI, MVAPICH) started this process.

    `srun --mpi=pmi2` sets PMI_RANK and PMI_SIZE too, without the local ranks: SLURM's own
    variables describe that job, so a PMI job inside a SLURM step counts only with Hydra's
    MPI_LOCALNRANKS.
    """
    return ("PMI_RANK" in environ and "PMI_SIZE" in environ
            and ("MPI_LOCALNRANKS" in environ or "SLURM_STEP_ID" not in environ))


def _job_key(environ, one_host):
    key = environ.get("PMI_KVSNAME") or environ.get("PMIX_NAMESPACE") or environ.get("PMI_JOBID")
    if key:
        return key
    # Hydra tells no job id: on one host the ranks share their parent, the host's proxy.
    return f"pmi-{os.getppid()}" if one_host else ""


def read(environ):
    """This process's `Placement`; across hosts rank 0 publishes its address."""
    size, local_size = integer(environ, "PMI_SIZE"), integer(environ, "MPI_LOCALNRANKS", 1)
    return Placement(NAME, integer(environ, "PMI_RANK"), size, integer(environ, "MPI_LOCALRANKID", 0),
                     local_size, job_key=_job_key(environ, local_size == size))
