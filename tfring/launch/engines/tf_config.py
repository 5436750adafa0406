"""TF_CONFIG, as Kubeflow's TFJob (and MultiWorkerMirroredStrategy users) set it.

    TF_CONFIG='{"cluster": {"chief": ["job-chief-0:2222"], "worker": ["job-worker-0:2222", ...]},
                "task": {"type": "worker", "index": 0}}'

Ranks are the chief (if any) then the workers in index order, as MultiWorkerMirroredStrategy
numbers them; rank 0's store listens on the port its cluster entry names (the port TFJob opens for
TensorFlow's own server, which tfring does not start). An `evaluator` task is not part of the
ring: it runs as a job of one rank. Parameter servers have no place in an all-reduce job.
"""

import json

from tfring.launch.engines.placement import Placement, host_port

NAME = "tf_config"
_TRAINING_TYPES = ("chief", "worker")


def detect(environ):
    """Whether TF_CONFIG is set (and not empty)."""
    return bool(environ.get("TF_CONFIG", "").strip())


def _parse(text):
    try:
        config = json.loads(text)
        cluster, task = config["cluster"], config.get("task", {})
        return cluster, task.get("type", "worker"), int(task.get("index", 0))
    except (ValueError, TypeError, KeyError, AttributeError):
        raise ValueError(f"TF_CONFIG must be JSON with a 'cluster' and a 'task' of 'type' and 'index', "
                         f"got {text[:200]!r}") from None


def read(environ):
    """This process's `Placement` from TF_CONFIG."""
    cluster, kind, index = _parse(environ["TF_CONFIG"])
    if cluster.get("ps"):
        raise ValueError("TF_CONFIG names parameter servers ('ps'): tfring all-reduces among chief and "
                         "workers only; remove the ps tasks from the job")
    if kind == "evaluator":
        return Placement(NAME, 0, 1, job_key="evaluator")
    if kind not in _TRAINING_TYPES:
        raise ValueError(f"TF_CONFIG task type {kind!r} is not one of chief, worker, evaluator")
    addresses = [a for t in _TRAINING_TYPES for a in cluster.get(t) or []]
    tasks = [(t, i) for t in _TRAINING_TYPES for i in range(len(cluster.get(t) or []))]
    if (kind, index) not in tasks:
        raise ValueError(f"TF_CONFIG task {kind}:{index} is not in its cluster ({len(tasks)} tasks)")
    store = host_port(addresses[0], "TF_CONFIG's first task address")
    hosts = [host_port(a, "TF_CONFIG")[0] for a in addresses]
    rank = tasks.index((kind, index))
    # Tasks sharing a host (one per GPU) number themselves on it in rank order.
    return Placement(NAME, rank, len(tasks), hosts[:rank].count(hosts[rank]), hosts.count(hosts[rank]),
                     job_key="tf_config:" + ",".join(addresses), store=store)
