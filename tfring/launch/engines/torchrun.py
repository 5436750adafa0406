"""The torchrun-style variables: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK, LOCAL_WORLD_SIZE.

Kubeflow's PyTorchJob, JobSet and torchrun itself set them. Rank 0's store listens on
MASTER_ADDR:MASTER_PORT; under torchrun, whose agent already serves its own store on that port
(TORCHELASTIC_USE_AGENT_STORE), on MASTER_PORT + 1.
"""

from tfring.launch.engines.placement import Placement, integer

NAME = "torchrun"


def detect(environ):
    """Whether the torchrun-style variables are all there."""
    return all(name in environ for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def read(environ):
    """This process's `Placement` from the torchrun-style variables."""
    size = integer(environ, "WORLD_SIZE")
    port = integer(environ, "MASTER_PORT")
    if environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true":
        port += 1
    if not 0 < port < 65536:
        raise ValueError(f"MASTER_PORT must leave a port for rank 0's store, got {environ['MASTER_PORT']!r} "
                         "(set TFRING_STORE_ADDR=HOST:PORT to choose it)")
    local_size = integer(environ, "LOCAL_WORLD_SIZE", 1)
    job_key = environ.get("TORCHELASTIC_RUN_ID") or f"{environ['MASTER_ADDR']}:{environ['MASTER_PORT']}"
    return Placement(NAME, integer(environ, "RANK"), size, integer(environ, "LOCAL_RANK", 0), local_size,
                     job_key=job_key, store=(environ["MASTER_ADDR"], port))
