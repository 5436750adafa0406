"""A representative part of Horovod's own TensorFlow tests (tests/peers/horovod), in `make test`.

The whole set (three files, 2 and 3 ranks, about 10 minutes) is `make test-horovod-suite`; these
cover each kind of collective, its gradient, its errors and the object collectives, on 2 ranks, in
TF1 graph mode and eagerly (Horovod runs each test both ways), the elastic state objects, and
process sets on 3 ranks (a set of two ranks beside a set of one).
"""

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.multiprocess

SUITE = os.path.join(os.path.dirname(__file__), "peers", "horovod", "run_suite.py")
SELECTED = [
    "test_horovod_allreduce_cpu_prescale", "test_horovod_allreduce_error", "test_horovod_allreduce_indexed_slices_cpu",
    "test_horovod_allgather_grad_cpu", "test_horovod_broadcast_grad_cpu", "test_horovod_alltoall_one_rank_sends_nothing_cpu",
    "test_horovod_alltoall_grad_cpu", "test_horovod_reducescatter_cpu_uneven_fused", "test_broadcast_object",
    "test_elastic_state", "test_horovod_rank", "test_horovod_size",  # these two read horovodrun's HOROVOD_RANK/SIZE
]
PROCESS_SETS = [
    "test_horovod_allreduce_grad_cpu_process_sets", "test_horovod_allreduce_process_set_id_error",
    "test_horovod_broadcast_grad_cpu_process_sets", "test_horovod_alltoall_cpu_process_sets",
    "test_horovod_grouped_reducescatter_cpu_process_sets", "test_allgather_object_process_sets",
    "test_distributed_gradient_tape_process_sets", "test_legacy_DistributedOptimizer_process_sets",
]


def _run(np_, files, selected, tmp_path):
    """Runs the `selected` tests of `files` on `np_` ranks; returns {test: outcome} and the output."""
    out = tmp_path / f"summary-{np_}.json"
    proc = subprocess.run([sys.executable, SUITE, "--np", str(np_), "--files", *files, "--select",
                           " or ".join(selected), "--out", str(out)], capture_output=True, text=True, timeout=900)
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    tests = json.loads(out.read_text())["tests"]
    ran = {name.split("::")[1]: outcome for name, (outcome, _) in tests.items()}
    assert all(any(name.startswith(s) for name in ran) for s in selected), (sorted(ran), proc.stdout[-2000:])
    return ran, proc.stdout


def test_a_representative_part_of_horovods_tests_passes_on_two_ranks(tmp_path):
    ran, output = _run(2, ["test_tensorflow.py"], SELECTED, tmp_path)
    assert {name: outcome for name, outcome in ran.items() if outcome != "passed"} == {}, output[-3000:]


def test_horovods_process_set_tests_pass_on_three_ranks(tmp_path):
    ran, output = _run(3, ["test_tensorflow_process_sets.py"], PROCESS_SETS, tmp_path)
    assert {name: outcome for name, outcome in ran.items() if outcome != "passed"} == {}, output[-3000:]
