"""`tfring run`: the launcher sets TFRING_RANK, TFRING_SIZE, TFRING_LOCAL_*, TFRING_STORE_ADDR."""

from tfring.launch import variables as v
from tfring.launch.engines.placement import Placement, integer

NAME = "tfring"


def detect(environ):
    """Whether `tfring run` started this process."""
    return v.RANK in environ


def read(environ):
    """This process's `Placement` from `tfring run`'s variables."""
    placement = Placement(NAME, integer(environ, v.RANK), integer(environ, v.SIZE),
                          integer(environ, v.LOCAL_RANK, 0), integer(environ, v.LOCAL_SIZE, 1),
                          job_key=environ.get(v.JOB_ID, "tfring"))
    if placement.size > 1 and v.STORE_ADDR not in environ:
        raise ValueError(f"{v.RANK} is set but {v.STORE_ADDR} is not: start the job with `tfring run`")
    return placement
