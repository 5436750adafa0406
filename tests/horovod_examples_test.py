"""Horovod's TensorFlow 2 examples (tests/peers/horovod/upstream/examples) on tfring.horovod, with only
their import lines changed (and the lines Keras 3 itself refuses): each runs on 2 ranks with offline
MNIST and ends with the ranks' weights bit-identical; the Keras one, with dropout off and its data
order fixed, equal (in float64, to 1e-12) to one process trained on 2 x its batch. Capped to a few
steps here; Horovod's elastic Keras example, with the same changes, as an elastic job that loses a
rank. `make test-horovod-suite` runs them longer and runs the synthetic benchmark too.
"""

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.multiprocess

RUNNER = os.path.join(os.path.dirname(__file__), "peers", "horovod", "run_examples.py")


def test_horovods_mnist_examples_run_with_the_import_line_changed():
    done = subprocess.run([sys.executable, RUNNER, "--np", "2", "--max-steps", "3", "--timeout", "240",
                           "--only", "tensorflow2_keras_mnist.py", "tensorflow2_mnist.py"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    for name in ("tensorflow2_keras_mnist.py", "tensorflow2_mnist.py"):
        line, = [l for l in done.stdout.splitlines() if l.startswith(f"== {name}:")]
        assert line.startswith(f"== {name}: exit 0;") and line.endswith("bit-identical: True"), line
    assert "rewrote import line" in done.stdout


def test_horovods_keras_example_equals_one_process_on_n_times_the_batch():
    # In float64: float32's rounding (which Adam grows over steps) would hide a real difference.
    done = subprocess.run([sys.executable, RUNNER, "--np", "2", "--max-steps", "5", "--timeout", "240",
                           "--only", "--compare-one-process", "--floatx", "float64"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    line, = [l for l in done.stdout.splitlines() if "against one process" in l]
    assert "ranks bit-identical: True" in line, line
    assert float(line.split("max |dw| = ")[1].split()[0]) <= 1e-12, line


def test_horovods_elastic_keras_example_goes_on_from_its_commit_after_losing_a_rank():
    # 1 warm-up batch, then 3 per epoch (capped): rank 1 dies after the first batch of epoch 1.
    done = subprocess.run([sys.executable, RUNNER, "--max-steps", "3", "--timeout", "300", "--only", "--elastic", "5"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    line, = [l for l in done.stdout.splitlines() if l.startswith("== tensorflow2_keras_mnist_elastic.py")]
    # Started again on the slot left, from the commit after that batch (Horovod's state.batch is its index).
    assert line.endswith("exit 0; reset on 1 rank(s) at epoch 1 batch 0"), line
    assert "starting the job again" in done.stdout and "rewrote Keras 3 optimizers have no `lr`" in done.stdout


def test_horovods_elastic_keras_example_grows_at_its_next_commit():
    # One rank; after 3 batches the host offers a second slot: commit() raises HostsUpdatedInterrupt,
    # and the job goes on on two ranks from that commit, after the example's reset callback.
    done = subprocess.run([sys.executable, RUNNER, "--max-steps", "10", "--timeout", "300", "--only", "--elastic", "3",
                           "--elastic-change", "grow"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    line, = [l for l in done.stdout.splitlines() if l.startswith("== tensorflow2_keras_mnist_elastic.py")]
    assert "exit 0; reset on 2 rank(s) at epoch" in line, line
    assert "tfring run: the ranks stopped at a commit" in done.stdout, done.stdout[-3000:]
