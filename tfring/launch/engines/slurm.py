"""SLURM's `srun` (also inside `sbatch` scripts): SLURM_PROCID, SLURM_STEP_NODELIST, ...

Rank 0 runs on the first node of the step (srun's block and cyclic distributions both put task 0
there); its store listens on a port derived from the job and step ids, so no rank needs to be told.
"""

from tfring.launch.engines.placement import Placement, integer
from tfring.launch.engines.slurm_hostlist import expand_hostlist, expand_tasks_per_node

NAME = "slurm"


def detect(environ):
    """Whether `srun` started this process as a task of a job step.

    An `sbatch` script itself also sees SLURM_PROCID and the allocation's SLURM_NTASKS, but is one
    process: only a step (SLURM_STEP_ID, set by srun) is a multi-rank job. Under `srun torchrun`
    the workers inherit the step's variables, but torchrun is what started them.
    """
    return "SLURM_PROCID" in environ and "SLURM_STEP_ID" in environ and "TORCHELASTIC_RUN_ID" not in environ


def _first(environ, *names):
    for name in names:
        if environ.get(name):
            return name, environ[name]
    raise ValueError(f"srun set SLURM_PROCID but none of {', '.join(names)}")


def read(environ):
    """This process's `Placement` from srun's variables."""
    size_name = "SLURM_STEP_NUM_TASKS" if "SLURM_STEP_NUM_TASKS" in environ else "SLURM_NTASKS"
    size = integer(environ, size_name, 1)
    where, nodelist = _first(environ, "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
    nodes = expand_hostlist(nodelist, where)
    where, per_node = _first(environ, "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")
    counts = expand_tasks_per_node(per_node, where)
    node = integer(environ, "SLURM_NODEID", 0)
    if len(counts) != len(nodes) or not 0 <= node < len(nodes):
        raise ValueError(f"{where}={per_node!r} does not match the {len(nodes)} nodes of the step "
                         f"(node id {node})")
    return Placement(NAME, integer(environ, "SLURM_PROCID"), size, integer(environ, "SLURM_LOCALID", 0),
                     counts[node], job_key=f"{environ.get('SLURM_JOB_ID', 'slurm')}.{environ['SLURM_STEP_ID']}",
                     rank0_host=nodes[0] if len(nodes) > 1 else None)
