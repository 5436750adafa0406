"""The layer contracts (.importlinter) hold, and they catch what they are for.

Each breaking case copies the package, adds one bad import (a lazy one: those count too) and
checks that `lint-imports` fails naming the contract and the import.
"""

import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir)
LINT = os.path.join(os.path.dirname(sys.executable), "lint-imports")


def _lint(root):
    env = dict(os.environ, PYTHONPATH=str(root))
    return subprocess.run([LINT, "--no-cache", "--config", os.path.join(root, ".importlinter")], cwd=root,
                          capture_output=True, text=True, env=env, timeout=300)


def _copy_with(tmp_path, module, line):
    shutil.copytree(os.path.join(ROOT, "tfring"), tmp_path / "tfring",
                    ignore=shutil.ignore_patterns("__pycache__", "lib", "cc", "*.so"))
    shutil.copytree(os.path.join(ROOT, "tfring_dev"), tmp_path / "tfring_dev",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(os.path.join(ROOT, ".importlinter"), tmp_path / ".importlinter")
    path = tmp_path / "tfring" / module
    path.write_text(path.read_text() + f"\n\ndef _deliberately_bad():\n    {line}\n")
    return tmp_path


def test_the_tree_keeps_every_contract():
    proc = _lint(os.path.abspath(ROOT))
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert re.search(r"Contracts: \d+ kept, 0 broken\.", proc.stdout), proc.stdout[-2000:]


@pytest.mark.parametrize("module,line,contract,named", [
    ("ops/collectives.py", "from tfring.strategy import ring_strategy",
     "Layers only point down", "tfring.ops is not allowed to import tfring.strategy"),
    ("runtime.py", "import tfring.data.pipeline",
     "Layers only point down", "tfring.runtime is not allowed to import tfring.data"),
    ("launch/launcher.py", "import tensorflow",
     "never import TensorFlow", "tfring.launch.launcher -> tensorflow"),
    ("strategy/strategy_base.py", "from tfring.strategy.keras_wraps import checkpointing",
     "No import cycles", ".strategy_base -> .keras_wraps"),
    ("strategy/gradients/buckets.py", "from tfring.strategy.gradients import door",
     "Inside strategy.gradients", "tfring.strategy.gradients.buckets -> tfring.strategy.gradients.door"),
    ("runtime.py", "from tfring_dev.testing import run_job",
     "tfring never imports tfring_dev", "tfring.runtime -> tfring_dev.testing"),
])
def test_a_deliberate_bad_import_breaks_its_contract(tmp_path, module, line, contract, named):
    proc = _lint(_copy_with(tmp_path, module, line))
    assert proc.returncode != 0
    broken = proc.stdout[proc.stdout.index("Broken contracts"):]
    assert contract in broken and named in broken, proc.stdout[-3000:]
