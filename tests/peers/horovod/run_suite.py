"""Runs Horovod's own TensorFlow tests against tfring.horovod, as `tfring run -np N` jobs.

The files in upstream/ are Horovod's, unchanged, at the commit named in README.md. This script copies
them to a private folder and rewrites their import lines only: `horovod.tensorflow[.keras]` and
`horovod.keras` become `tfring.horovod...`; the test plumbing they take from Horovod's internals
(`horovod.common.util`, `horovod.runner...`) comes from `horovod_test_shims.py`, written beside them.
Every rank runs pytest over the same files in the same order, as under Horovod's own mpirun; the
ranks' results are read from JUnit XML and summed up.

Usage:
    python tests/peers/horovod/run_suite.py --np 2 [--files test_tensorflow2_keras.py ...] [--select EXPR]
        [--out FILE] [--no-graph-rewrites]

--no-graph-rewrites turns TensorFlow's arithmetic rewriting and constant folding off in every rank
(the tests' TF1 sessions and tf.functions): on 3 ranks some tests' references are otherwise rewritten
((x*3)/3 -> x) and differ from an exact reduction in the last bit (README.md).

--horovod-python PY runs the same files, unchanged, under Horovod itself: PY is the Python of an
environment with Horovod, pytest, mock, parameterized and cloudpickle (`make bench-horovod` builds
Horovod 0.28.1 in .venv-horovod), launched with its `horovodrun --gloo`. What tfring fails and
Horovod fails too is a limit of the test, not of tfring (README.md).
"""

import argparse
import collections
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree

HERE = os.path.dirname(os.path.abspath(__file__))
UPSTREAM = os.path.join(HERE, "upstream")
FILES = ["test_tensorflow.py", "test_tensorflow2_keras.py", "test_tensorflow_process_sets.py"]
SHIMS = '''"""Horovod's test plumbing that its test files import from Horovod's internals."""
import os
import threading

from packaging import version


def is_version_greater_equal_than(ver, target):
    return version.parse(ver) >= version.parse(target)


def get_env_rank_and_size():
    for rank, size in (("TFRING_RANK", "TFRING_SIZE"), ("PMI_RANK", "PMI_SIZE")):
        if rank in os.environ and size in os.environ:
            return int(os.environ[rank]), int(os.environ[size])
    return None


def in_thread(target, args=(), name=None, daemon=True, silent=False):
    thread = threading.Thread(target=target, args=args, name=name, daemon=daemon)
    thread.start()
    return thread
'''
REWRITES = [
    (re.compile(r"^(\s*)import horovod[ \t]*$", re.M), r"\1import tfring.horovod as horovod"),
    (re.compile(r"^(\s*)import horovod\.((?:tensorflow|keras)\S*) as (\w+)", re.M), r"\1import tfring.horovod.\2 as \3"),
    (re.compile(r"^(\s*)from horovod\.((?:tensorflow|keras)\S*) import", re.M), r"\1from tfring.horovod.\2 import"),
    (re.compile(r"^(\s*)from horovod\.(?:common|runner)\S* import", re.M), r"\1from horovod_test_shims import"),
]


NO_GRAPH_REWRITES = '''"""Written by run_suite.py --no-graph-rewrites: the tests' references are computed as written."""
import tensorflow as tf

tf.config.optimizer.set_experimental_options({"arithmetic_optimization": False, "constant_folding": False})
'''


def prepare(folder, graph_rewrites=True, rewrite=True):
    """Copies the upstream files into `folder` with their import lines rewritten (unless not
    `rewrite`; and, without `graph_rewrites`, a conftest.py turning TensorFlow's arithmetic rewriting
    off); returns the count of lines changed."""
    changed = 0
    for name in os.listdir(UPSTREAM):
        if not name.endswith(".py"):
            continue
        text = open(os.path.join(UPSTREAM, name)).read()
        for pattern, replacement in REWRITES if rewrite else []:
            text, n = pattern.subn(replacement, text)
            changed += n
        with open(os.path.join(folder, name), "w") as f:
            f.write(text)
    with open(os.path.join(folder, "horovod_test_shims.py"), "w") as f:
        f.write(SHIMS)
    if not graph_rewrites:
        with open(os.path.join(folder, "conftest.py"), "w") as f:
            f.write(NO_GRAPH_REWRITES)
    return changed


def tfring_job(np_, command, **env):
    """The `tfring run -np np_` command line for `command`, and its environment: one intra-op
    thread per rank, TensorFlow's info logs off, `env` added."""
    job_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TF_NUM_INTRAOP_THREADS="1", OMP_NUM_THREADS="1", **env)
    return [sys.executable, "-m", "tfring", "run", "-np", str(np_), "--timeout", "60"] + command, job_env


def horovod_job(python, np_, command, **env):
    """As `tfring_job`, under Horovod's own `horovodrun --gloo` from `python`'s environment."""
    job_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TF_NUM_INTRAOP_THREADS="1", OMP_NUM_THREADS="1", **env)
    job_env["PATH"] = os.path.dirname(python) + os.pathsep + job_env.get("PATH", "")
    horovodrun = os.path.join(os.path.dirname(python), "horovodrun")
    return [horovodrun, "-np", str(np_), "--gloo", "-H", f"localhost:{np_}"] + command, job_env


def run(np_, files, folder, timeout, select=None, horovod_python=None):
    """Runs pytest on every rank of a `tfring run -np np_` job (or, with `horovod_python`, of a Horovod
    job) (only the tests `select`, a pytest `-k` expression, picks); returns the launcher's exit code."""
    rank = "$HOROVOD_RANK" if horovod_python else "$TFRING_RANK"
    # `tfring run` sets horovodrun's HOROVOD_RANK and HOROVOD_SIZE, which test_horovod_rank/_size read.
    rank_cmd = ("exec " +
                (horovod_python or sys.executable) +
                " -m pytest -p no:cacheprovider -q -o python_files='test_*.py' --rootdir=. "
                f"--junitxml=results-rank{rank}.xml " + (f"-k {shlex.quote(select)} " if select else "") +
                " ".join(files))
    path = folder + os.pathsep + os.environ.get("PYTHONPATH", "")
    cmd, env = (horovod_job(horovod_python, np_, ["sh", "-c", rank_cmd], PYTHONPATH=path) if horovod_python
                else tfring_job(np_, ["sh", "-c", rank_cmd], PYTHONPATH=path))
    with open(os.path.join(folder, "job.log"), "w") as log:
        try:
            return subprocess.run(cmd, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT,
                                  timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            return "timeout"


def results(folder, np_):
    """Per test: the outcome on each rank ("passed", "failed", "error", "skipped" or "missing")."""
    outcomes = collections.defaultdict(dict)
    for rank in range(np_):
        path = os.path.join(folder, f"results-rank{rank}.xml")
        if not os.path.exists(path):
            continue
        for case in ElementTree.parse(path).getroot().iter("testcase"):
            name = f"{case.get('classname')}::{case.get('name')}"
            outcome, message = "passed", ""
            for tag in ("failure", "error", "skipped"):
                node = case.find(tag)
                if node is not None:
                    outcome = {"failure": "failed"}.get(tag, tag)
                    message = (node.get("message") or "").splitlines()[0][:200] if node.get("message") else ""
                    break
            outcomes[name][rank] = (outcome, message)
    return outcomes


def summarize(outcomes, np_):
    """One outcome per test (the worst over the ranks) and the counts."""
    order = ["missing", "error", "failed", "skipped", "passed"]
    merged = {}
    for name, per_rank in outcomes.items():
        worst = min((per_rank.get(r, ("missing", "")) for r in range(np_)), key=lambda o: order.index(o[0]))
        merged[name] = worst
    return merged, collections.Counter(o for o, _ in merged.values())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--files", nargs="*", default=FILES)
    parser.add_argument("--select", default=None, help="only the tests this pytest -k expression picks")
    parser.add_argument("--out", default=None, help="write the summary (JSON) here")
    parser.add_argument("--no-graph-rewrites", action="store_true",
                        help="turn TensorFlow's arithmetic rewriting and constant folding off (see README.md)")
    parser.add_argument("--timeout", type=float, default=3000, help="seconds for the whole job")
    parser.add_argument("--horovod-python", default=None,
                        help="run the files unchanged under Horovod itself, from this Python's environment")
    parser.add_argument("--keep", action="store_true", help="keep the folder (job.log, each rank's results) and say where")
    args = parser.parse_args(argv)
    folder = tempfile.mkdtemp(prefix="tfring-horovod-suite-")
    try:
        changed = prepare(folder, graph_rewrites=not args.no_graph_rewrites, rewrite=not args.horovod_python)
        code = run(args.np, args.files, folder, args.timeout, args.select, args.horovod_python)
        merged, counts = summarize(results(folder, args.np), args.np)
        under = "Horovod itself" if args.horovod_python else "tfring.horovod"
        print(f"Horovod's tests on {under}, {args.np} ranks ({changed} import lines rewritten): "
              f"launcher exit {code}; " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
        for name, (outcome, message) in sorted(merged.items()):
            if outcome not in ("passed",):
                print(f"  {outcome:8} {name}  {message}")
        if code not in (0, 1) or not merged:
            print(open(os.path.join(folder, "job.log")).read()[-5000:])
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"np": args.np, "exit": code, "counts": counts,
                           "tests": {k: list(v) for k, v in merged.items()}}, f, indent=1)
        return 0 if code == 0 else 1
    finally:
        if args.keep:
            print(f"kept: {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
