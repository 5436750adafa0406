"""A Kubernetes Indexed Job: JOB_COMPLETION_INDEX is the rank.

Kubernetes says nothing else, so the manifest sets TFRING_SIZE (the job's `completions`) and
TFRING_STORE_ADDR (the first pod's name under the job's headless Service, e.g.
`train-0.train:29500`); see examples/kubernetes/.
"""

from tfring.launch import variables as v
from tfring.launch.engines.placement import Placement, integer

NAME = "indexed_job"


def detect(environ):
    """Whether this process is a pod of an Indexed Job."""
    return "JOB_COMPLETION_INDEX" in environ


def read(environ):
    """This process's `Placement`: one rank per pod."""
    if v.SIZE not in environ or v.STORE_ADDR not in environ:
        raise ValueError(f"a Kubernetes Indexed Job pod needs {v.SIZE} (the job's completions) and "
                         f"{v.STORE_ADDR} (pod 0 under the headless Service, e.g. train-0.train:29500) in "
                         "its environment: see examples/kubernetes/")
    return Placement(NAME, integer(environ, "JOB_COMPLETION_INDEX"), integer(environ, v.SIZE),
                     job_key=environ[v.STORE_ADDR])
