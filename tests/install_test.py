"""tfring installed as a user installs it: the sdist and the wheel of this checkout (`python -m
build`), in fresh virtual environments that already have TensorFlow (2.17.1, the reference, and
2.21, the newest), each running a 2-rank job (an allreduce and a small `fit`) and `tfring doctor`
from outside the checkout. `make test-install` runs these (marked `install`; they download
TensorFlow into each environment, or take it from pip's cache).

- The wheel carries the op libraries this checkout built for both TensorFlows (`make wheel`), so it
  runs with no compiler on PATH;
- the sdist carries sources only: `import tfring` builds the library on first use, and says which
  package to install when there is no compiler (checked on 2.21 only: the build is the same for both).
"""

import glob
import os
import subprocess
import sys
import textwrap
import zipfile

import pytest

from tfring_dev.testing import QUIET_ENV
from tfring_dev.testing import path_without

pytestmark = [pytest.mark.install, pytest.mark.multiprocess]

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TENSORFLOWS = {"2.17": ["tensorflow-cpu==2.17.1", "numpy<2"], "2.21": ["tensorflow-cpu==2.21.*"]}
SMOKE = textwrap.dedent("""
    import numpy as np, keras, tensorflow as tf, tfring
    strategy = tfring.RingStrategy()
    print("SUM", tfring.ops.allreduce(tf.constant([1.0, 2.0]) * (tfring.rank() + 1)).numpy().tolist())
    x = np.linspace(-1, 1, 64, dtype="float32").reshape(32, 2)
    y = (x[:, :1] * 3 - x[:, 1:]).astype("float32")
    with strategy.scope():
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    history = model.fit(x, y, batch_size=8, epochs=3, verbose=0)
    print("LOSS", history.history["loss"][-1], "FROM", tfring.__file__)
""")


def _run(cmd, env=None, cwd=None, timeout=900):
    full = {k: v for k, v in os.environ.items() if not k.startswith(("TFRING_", "PYTHONPATH", "VIRTUAL_ENV"))}
    full.update(QUIET_ENV, **(env or {}))
    return subprocess.run(cmd, capture_output=True, text=True, env=full, cwd=cwd, timeout=timeout)


def _ok(proc):
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-3000:])
    return proc


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    """The sdist and the wheel, built from this checkout as `make wheel` builds them."""
    out = tmp_path_factory.mktemp("dist")
    # Both from the checkout (isolated builds, without TensorFlow): the wheel takes the libraries
    # built in it; `python -m build` alone would build the wheel from the sdist, without them.
    _ok(_run([sys.executable, "-m", "build", "--sdist", "--outdir", str(out), REPO]))
    _ok(_run([sys.executable, "-m", "build", "--wheel", "--outdir", str(out), REPO]))
    sdist, = glob.glob(str(out / "tfring-*.tar.gz"))
    wheel, = glob.glob(str(out / "tfring-*.whl"))
    return sdist, wheel


@pytest.fixture(scope="module")
def venvs(tmp_path_factory):
    """`venvs("2.21")`: a fresh environment with that TensorFlow and nothing of tfring, made once per module."""
    made = {}

    def get(tensorflow):
        if tensorflow not in made:
            folder = tmp_path_factory.mktemp(f"venv-tf{tensorflow}")
            _ok(_run([sys.executable, "-m", "venv", str(folder)]))
            _ok(_run([str(folder / "bin" / "python"), "-m", "pip", "install", "-q", *TENSORFLOWS[tensorflow]]))
            made[tensorflow] = folder
        return made[tensorflow]

    return get


def _smoke(folder, tmp_path, env=None):
    script = tmp_path / "smoke.py"
    script.write_text(SMOKE)
    return _run([str(folder / "bin" / "tfring"), "run", "-np", "2", "--all-output", "python", str(script)],
                env=env, cwd=str(tmp_path))


def _check_smoke(proc, folder):
    _ok(proc)
    for rank in (0, 1):
        assert f"[{rank}] SUM [3.0, 6.0]" in proc.stdout, proc.stdout
    losses = [line.split()[2] for line in proc.stdout.splitlines() if " LOSS " in f" {line} "]
    assert len(losses) == 2 and losses[0] == losses[1], proc.stdout
    assert f"FROM {folder}" in proc.stdout, proc.stdout  # the installed package, not the checkout


def test_the_wheel_carries_a_library_for_each_tested_tensorflow(dist):
    names = zipfile.ZipFile(dist[1]).namelist()
    libraries = sorted(n for n in names if n.endswith("_tfring_ops.so"))
    assert [os.path.basename(os.path.dirname(n))[:5] for n in libraries] == ["tf2.1", "tf2.2"], libraries
    assert dist[1].endswith("-py3-none-linux_x86_64.whl")
    assert not [n for n in names if n.endswith("_test.py") or n.startswith("tfring_dev")]


@pytest.mark.parametrize("tensorflow", sorted(TENSORFLOWS))
def test_the_wheel_installs_and_runs_a_job_without_a_compiler(dist, venvs, tensorflow, tmp_path):
    folder = venvs(tensorflow)
    _ok(_run([str(folder / "bin" / "python"), "-m", "pip", "install", "-q", "--force-reinstall", "--no-deps", dist[1]]))
    no_compiler = {"PATH": path_without(tmp_path / "bin", ["g++", "c++"])}
    proc = _smoke(folder, tmp_path, env=no_compiler)
    _check_smoke(proc, folder)
    assert "building the op library" not in proc.stderr
    doctor = _run([str(folder / "bin" / "tfring"), "doctor"], env=no_compiler, cwd=str(tmp_path))
    assert doctor.returncode == 0 and f"built for TensorFlow {tensorflow}." in doctor.stdout, doctor.stdout


def test_the_sdist_builds_its_library_on_first_use_or_names_the_compiler(dist, venvs, tmp_path):
    folder = venvs("2.21")  # the build on first use is the same for each TensorFlow (about 90 s): once
    _ok(_run([str(folder / "bin" / "python"), "-m", "pip", "install", "-q", "--force-reinstall", "--no-deps", dist[0]]))
    proc = _smoke(folder, tmp_path, env={"PATH": path_without(tmp_path / "bin", ["g++", "c++"])})
    assert proc.returncode != 0
    assert "tfring must build its op library (it has not been built yet) but has no C++ compiler" in proc.stderr
    assert "apt-get install g++" in proc.stderr and "Segmentation" not in proc.stderr
    proc = _smoke(folder, tmp_path)
    _check_smoke(proc, folder)
    assert proc.stderr.count("tfring: building the op library because it has not been built yet") == 1, proc.stderr
