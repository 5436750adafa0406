"""The variables Kubernetes operators set (TFJob, PyTorchJob/JobSet/torchrun, Indexed Job), read as a pod would."""

import json

import pytest

from tfring.launch import cluster


def _tf_config(kind, index, chief=1, workers=2, host="job"):
    spec = {"worker": [f"{host}-worker-{i}:2222" for i in range(workers)]}
    if chief:
        spec["chief"] = [f"{host}-chief-0:2222"]
    return {"TF_CONFIG": json.dumps({"cluster": spec, "task": {"type": kind, "index": index}}), "TFRING_SECRET": "s"}


def test_tf_config_puts_the_chief_first_and_serves_the_store_on_its_port():
    infos = [cluster.discover(_tf_config(*task)) for task in (("chief", 0), ("worker", 0), ("worker", 1))]
    assert [(i.launcher, i.rank, i.size, i.local_size) for i in infos] == [("tf_config", r, 3, 1) for r in range(3)]
    assert {(i.store_host, i.store_port) for i in infos} == {("job-chief-0", 2222)}
    assert len({i.job_id for i in infos}) == 1
    only_workers = cluster.discover(_tf_config("worker", 1, chief=0))
    assert (only_workers.rank, only_workers.store_host) == (1, "job-worker-0")


def test_tf_config_on_one_host_is_a_local_job():
    env = {"TF_CONFIG": json.dumps({"cluster": {"worker": ["localhost:3001", "localhost:3002"]},
                                    "task": {"type": "worker", "index": 1}}), "TFRING_SECRET": "s"}
    info = cluster.discover(env)
    assert (info.rank, info.local_rank, info.local_size, info.store_port) == (1, 1, 2, 3001)


def test_tf_config_tasks_sharing_a_host_number_themselves_on_it():
    # One task per GPU: two hosts with two workers each.
    workers = ["a:2222", "a:2223", "b:2222", "b:2223"]
    infos = [cluster.discover({"TF_CONFIG": json.dumps({"cluster": {"worker": workers},
                                                         "task": {"type": "worker", "index": i}}),
                               "TFRING_SECRET": "s"}) for i in range(4)]
    assert [(i.rank, i.local_rank, i.local_size) for i in infos] == [(0, 0, 2), (1, 1, 2), (2, 0, 2), (3, 1, 2)]


def test_tf_config_evaluator_runs_alone():
    env = _tf_config("evaluator", 0)
    assert cluster.discover(env).size == 1


@pytest.mark.parametrize("text,needle", [
    ("{not json", "must be JSON"),
    (json.dumps({"task": {"type": "worker", "index": 0}}), "must be JSON"),
    (json.dumps({"cluster": {"worker": ["a:1"], "ps": ["p:1"]}, "task": {"type": "worker", "index": 0}}),
     "parameter servers"),
    (json.dumps({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 3}}), "worker:3 is not in"),
    (json.dumps({"cluster": {"worker": ["a:1"]}, "task": {"type": "master", "index": 0}}), "'master' is not one"),
    (json.dumps({"cluster": {"worker": ["a", "b:1"]}, "task": {"type": "worker", "index": 0}}), "HOST:PORT"),
])
def test_bad_tf_config(text, needle):
    with pytest.raises(ValueError, match=needle):
        cluster.discover({"TF_CONFIG": text, "TFRING_SECRET": "s"})


TORCHRUN = {"RANK": "3", "WORLD_SIZE": "4", "MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456",
            "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "TFRING_SECRET": "s"}


def test_torchrun_style_variables():
    info = cluster.discover(TORCHRUN)
    assert (info.launcher, info.rank, info.size, info.local_rank, info.local_size) == ("torchrun", 3, 4, 1, 2)
    assert (info.store_host, info.store_port) == ("job-master-0", 23456)
    # A PyTorchJob sets no LOCAL_WORLD_SIZE: one rank per pod.
    pod = {k: v for k, v in TORCHRUN.items() if k not in ("LOCAL_RANK", "LOCAL_WORLD_SIZE")}
    assert cluster.discover(pod).local_size == 1


def test_under_torchrun_the_agent_keeps_master_port():
    info = cluster.discover(dict(TORCHRUN, TORCHELASTIC_USE_AGENT_STORE="True", TORCHELASTIC_RUN_ID="r1"))
    assert info.store_port == 23457


def test_torchrun_under_srun_is_torchrun():
    # srun torchrun ...: the workers inherit the step's SLURM variables, but torchrun started them.
    env = dict(TORCHRUN, TORCHELASTIC_RUN_ID="r1", SLURM_PROCID="0", SLURM_STEP_ID="0", SLURM_STEP_NUM_TASKS="2",
               SLURM_STEP_NODELIST="a,b", SLURM_STEP_TASKS_PER_NODE="1(x2)", SLURM_NODEID="0")
    info = cluster.discover(env)
    assert (info.launcher, info.rank, info.size) == ("torchrun", 3, 4)


def test_slurm_pmi2_is_read_as_slurm():
    # srun --mpi=pmi2 sets PMI_RANK/PMI_SIZE but not the local ranks: SLURM's variables describe the job.
    env = {"PMI_RANK": "1", "PMI_SIZE": "4", "PMI_JOBID": "7.0", "SLURM_PROCID": "1", "SLURM_STEP_ID": "0",
           "SLURM_LOCALID": "1", "SLURM_NODEID": "0", "SLURM_STEP_NUM_TASKS": "4", "SLURM_STEP_NODELIST": "n[1-2]",
           "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_JOB_ID": "7", "TFRING_SECRET": "s"}
    info = cluster.discover(env)
    assert (info.launcher, info.rank, info.local_rank, info.local_size, info.store_host) == ("slurm", 1, 1, 2, "n1")


def test_bad_master_port():
    with pytest.raises(ValueError, match="MASTER_PORT must leave a port.*TFRING_STORE_ADDR"):
        cluster.discover(dict(TORCHRUN, MASTER_PORT="65535", TORCHELASTIC_USE_AGENT_STORE="True"))


def test_indexed_job():
    env = {"JOB_COMPLETION_INDEX": "2", "TFRING_SIZE": "4", "TFRING_STORE_ADDR": "train-0.train:29500",
           "TFRING_SECRET": "s"}
    info = cluster.discover(env)
    assert (info.launcher, info.rank, info.size, info.local_size) == ("indexed_job", 2, 4, 1)
    assert (info.store_host, info.store_port) == ("train-0.train", 29500)
    with pytest.raises(ValueError, match="TFRING_SIZE .*TFRING_STORE_ADDR.*examples/kubernetes"):
        cluster.discover({"JOB_COMPLETION_INDEX": "0", "TFRING_SECRET": "s"})
    with pytest.raises(ValueError, match="outside"):
        cluster.discover(dict(env, JOB_COMPLETION_INDEX="4"))
