"""A representative part of Horovod's own TensorFlow tests (tests/peers/horovod), in `make test`.

The whole set (three files, 2 and 3 ranks, about 10 minutes) is `make test-horovod-suite`; these
cover each kind of collective, its gradient, its errors and the object collectives, on 2 ranks, in
TF1 graph mode and eagerly (Horovod runs each test both ways).
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
]


def test_a_representative_part_of_horovods_tests_passes_on_two_ranks(tmp_path):
    out = tmp_path / "summary.json"
    proc = subprocess.run([sys.executable, SUITE, "--np", "2", "--files", "test_tensorflow.py", "--select",
                           " or ".join(SELECTED), "--out", str(out)], capture_output=True, text=True, timeout=900)
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    tests = json.loads(out.read_text())["tests"]
    ran = {name.split("::")[1]: outcome for name, (outcome, _) in tests.items()}
    assert all(any(name.startswith(s) for name in ran) for s in SELECTED), (sorted(ran), proc.stdout[-2000:])
    assert {name: outcome for name, outcome in ran.items() if outcome != "passed"} == {}, proc.stdout[-3000:]
