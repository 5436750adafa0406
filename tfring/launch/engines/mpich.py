"""MPICH's and Intel MPI's Hydra `mpiexec` (the PMI interface): PMI_RANK, PMI_SIZE, MPI_LOCALRANKID."""

from tfring.launch.engines.placement import Placement, integer

NAME = "pmi"


def detect(environ):
    """Whether a PMI launcher (MPICH, Intel MPI, MVAPICH) started this process."""
    return "PMI_RANK" in environ and "PMI_SIZE" in environ


def read(environ):
    """This process's `Placement`; across hosts rank 0 publishes its address."""
    size, local_size = integer(environ, "PMI_SIZE"), integer(environ, "MPI_LOCALNRANKS", 1)
    return Placement(NAME, integer(environ, "PMI_RANK"), size, integer(environ, "MPI_LOCALRANKID", 0),
                     local_size, job_key=environ.get("PMI_KVSNAME") or environ.get("PMIX_NAMESPACE") or "pmi",
                     exchange=local_size != size)
