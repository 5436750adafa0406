"""Jobs started the way Kubernetes operators and torchrun start them: 2 local processes given exactly
the variables the operator would set, no `tfring run`. Each rank all-reduces and reports its place."""

import json
import os
import secrets
import subprocess
import sys

import pytest

from tfring.launch.addresses import free_port
from tfring_dev.testing import QUIET_ENV

pytestmark = pytest.mark.multiprocess

SCRIPT = """
import sys
import tensorflow as tf, tfring
tfring.init()
out = tfring.ops.allreduce(tf.fill([3], float(tfring.rank() + 1)), op="sum")
sys.stdout.write(f"{tfring.rank()} {tfring.size()} {tfring.local_rank()} {out.numpy().tolist()}\\n")
"""


def _run_ranks(envs, timeout=240):
    base = {k: v for k, v in {**os.environ, **QUIET_ENV}.items() if not k.startswith("TFRING_")}
    procs = [subprocess.Popen([sys.executable, "-c", SCRIPT], env={**base, **env}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for env in envs]
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            assert p.returncode == 0, err[-3000:]
            outs.append(out.strip())
    finally:
        for p in procs:
            p.kill()
    return outs


def test_torchrun_style_variables_as_pytorchjob_sets_them():
    port, secret = free_port(), secrets.token_hex(16)
    envs = [{"RANK": str(r), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
             "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": "2", "TFRING_SECRET": secret} for r in range(2)]
    assert _run_ranks(envs) == ["0 2 0 [3.0, 3.0, 3.0]", "1 2 1 [3.0, 3.0, 3.0]"]


def test_tf_config_as_tfjob_sets_it():
    ports, secret = [free_port(), free_port()], secrets.token_hex(16)
    cluster = {"chief": [f"localhost:{ports[0]}"], "worker": [f"localhost:{ports[1]}"]}
    envs = [{"TF_CONFIG": json.dumps({"cluster": cluster, "task": task}), "TFRING_SECRET": secret}
            for task in ({"type": "chief", "index": 0}, {"type": "worker", "index": 0})]
    assert _run_ranks(envs) == ["0 2 0 [3.0, 3.0, 3.0]", "1 2 1 [3.0, 3.0, 3.0]"]


def test_an_indexed_job_as_the_example_manifest_configures_it():
    secret, addr = secrets.token_hex(16), f"127.0.0.1:{free_port()}"
    envs = [{"JOB_COMPLETION_INDEX": str(r), "TFRING_SIZE": "2", "TFRING_STORE_ADDR": addr, "TFRING_SECRET": secret}
            for r in range(2)]
    # Each pod is its own host: local rank 0 of 1 on both.
    assert _run_ranks(envs) == ["0 2 0 [3.0, 3.0, 3.0]", "1 2 0 [3.0, 3.0, 3.0]"]


def test_the_example_manifest_sets_what_an_indexed_job_needs():
    yaml = pytest.importorskip("yaml")
    path = os.path.join(os.path.dirname(__file__), os.pardir, "examples", "kubernetes", "indexed-job.yaml")
    service, job = list(yaml.safe_load_all(open(path)))
    spec = job["spec"]
    env = {e["name"]: e for e in spec["template"]["spec"]["containers"][0]["env"]}
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"]
    assert env["TFRING_SIZE"]["value"] == str(spec["completions"])
    host, port = env["TFRING_STORE_ADDR"]["value"].rsplit(":", 1)
    name = job["metadata"]["name"]
    assert host == f"{name}-0.{service['metadata']['name']}" and spec["template"]["spec"]["subdomain"] == service["metadata"]["name"]
    assert service["spec"]["clusterIP"] == "None" and int(port) == service["spec"]["ports"][0]["port"]
    assert "secretKeyRef" in env["TFRING_SECRET"]["valueFrom"]
