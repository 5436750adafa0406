"""OpenMPI's `mpirun` / `mpiexec` (and `srun --mpi=pmix` jobs of OpenMPI programs): OMPI_COMM_WORLD_*."""

from tfring.launch.engines.placement import Placement, integer

NAME = "openmpi"


def detect(environ):
    """Whether OpenMPI started this process."""
    return "OMPI_COMM_WORLD_RANK" in environ


def read(environ):
    """This process's `Placement`; across hosts rank 0 publishes its address (mpirun says nothing of it)."""
    size, local_size = integer(environ, "OMPI_COMM_WORLD_SIZE"), integer(environ, "OMPI_COMM_WORLD_LOCAL_SIZE")
    job_key = (environ.get("OMPI_MCA_ess_base_jobid") or environ.get("PMIX_NAMESPACE")
               or environ.get("OMPI_MCA_orte_ess_jobid", "ompi"))
    return Placement(NAME, integer(environ, "OMPI_COMM_WORLD_RANK"), size,
                     integer(environ, "OMPI_COMM_WORLD_LOCAL_RANK"), local_size, job_key=job_key)
