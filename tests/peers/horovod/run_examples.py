"""Runs Horovod's TensorFlow 2 examples against tfring.horovod, as `tfring run -np N` jobs.

The files in upstream/examples/ are Horovod's, unchanged, at the commit named in README.md. This
script copies them to a private folder and rewrites their import lines (run_suite.py's rewrites) and
the line Keras 3 itself refuses (KERAS3, with the error Keras gives), then runs each one
through `example_runner.py`, which:
- hands Keras' MNIST loader an offline file in place of the download: scikit-learn's bundled digits
  (1,797 real handwritten digits, 8x8), scaled to MNIST's 28x28 uint8 layout;
- with --max-steps, caps each `fit`'s epochs and steps and each `Dataset.take` (the examples train for
  thousands of steps: 26 minutes a rank here); without it they run at their full length;
- saves every Keras model's trainable weights on every rank when the script ends, so the ranks can be
  compared (BatchNormalization's moving statistics are each rank's own, under Horovod too).

--compare-one-process (the Keras example only) also checks the job against one process trained on N
times the per-rank batch. The example itself has no such twin: each rank shuffles the whole dataset
in its own random order, and dropout draws per rank. So both runs get, from the runner only: dropout
off, the same seed everywhere, a seeded shuffle, and the job's ranks an interleaved shard of that
stream (`shard(N, rank)` before each `batch(b)`), so that rank r's batch k holds the rows of the
process's batch k of N x b that fall to it. The one process sees `hvd.size()` = N (its learning
rate, warm-up and steps are the job's) while its collectives run over itself alone. In float32 the
two differ by rounding (a sum of 2 x 128 rows against one of 256), which Adam grows: --floatx
float64 leaves it out.

--elastic K runs Horovod's elastic Keras example (upstream/examples/elastic) as an elastic job
(`tfring run --min-np 1 --max-np 2 --host-discovery-script`) whose rank 1 dies with its slot after K
batches (`--elastic-change lose`): the job must start again on one rank and go on from the example's
last commit; or (`grow`) which starts on one slot and is offered a second after K batches: the rank
must stop at its next commit (`HostsUpdatedInterrupt`) and the job go on on two.

Usage:
    python tests/peers/horovod/run_examples.py --np 2 [--max-steps K] [--only NAME ...] [--compare-one-process]
        [--elastic K [--elastic-change lose|grow]]
Exit status 0 when every example exited 0 and its ranks' weights are bit-identical (and, compared,
within 1e-5 of the one process's).
"""

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from run_suite import REWRITES, tfring_job  # noqa: E402  (one place for the rewrites and the job)

EXAMPLES = os.path.join(HERE, "upstream", "examples")
ELASTIC = "tensorflow2_keras_mnist_elastic.py"  # in EXAMPLES/elastic: run by --elastic only
# What Keras 3 removed from these examples, each with the error it gives, and the least change.
# (`experimental_run_tf_function=False` in compile, a Keras 2 switch Keras 3 refuses, needs no change:
# tfring.horovod.tensorflow.keras makes compile drop it with a note.)
KERAS3 = [
    (re.compile(r"\bopt\.variables\(\)"), "opt.variables",
     "optimizer.variables is a list in Keras 3: \"'list' object is not callable\""),
    (re.compile(r"tf\.keras\.backend\.set_value\(([\w.]+)\.lr,\s*(.+)\)$", re.M), r"\1.learning_rate.assign(\2)",
     "Keras 3 optimizers have no `lr` (\"'Adam' object has no attribute 'lr'\"), and set_value fails on Keras 3 "
     "variables (\"'str' object has no attribute 'name'\")"),
]
# Arguments per example: the synthetic benchmark's own flags pick a model that fits a CPU.
ARGS = {
    "tensorflow2_synthetic_benchmark.py": ["--model", "MobileNetV2", "--batch-size", "8", "--no-cuda",
                                           "--num-warmup-batches", "2", "--num-batches-per-iter", "2",
                                           "--num-iters", "3"],
}
RUNNER = r'''"""Runs one Horovod example (argv[1:]) with offline MNIST, optional step caps and a weights dump."""
import atexit, os, runpy, sys
import numpy as np
import tensorflow as tf
import keras
import keras.src.datasets.mnist as mnist_module

out, cap = os.environ["EXAMPLE_OUT"], int(os.environ.get("EXAMPLE_MAX_STEPS", "0"))
mnist_module.get_file = lambda *args, **kwargs: os.environ["OFFLINE_MNIST"]  # in place of the download

models = []
original_init = keras.Model.__init__
def recording_init(self, *args, **kwargs):
    original_init(self, *args, **kwargs)
    models.append(self)
keras.Model.__init__ = recording_init

twin = os.environ.get("EXAMPLE_TWIN")  # "job" or "N" (one process standing for N ranks): see run_examples.py
if twin:
    keras.config.set_floatx(os.environ["EXAMPLE_FLOATX"])
    keras.utils.set_random_seed(0)
    original_dropout, original_shuffle, original_batch = (keras.layers.Dropout.__init__, tf.data.Dataset.shuffle,
                                                          tf.data.Dataset.batch)
    keras.layers.Dropout.__init__ = lambda self, rate, *args, **kwargs: original_dropout(self, 0.0, *args, **kwargs)
    tf.data.Dataset.shuffle = lambda self, buffer_size, seed=None, *args, **kwargs: original_shuffle(
        self, buffer_size, 0, *args, **kwargs)
    if twin == "job":
        n, r = int(os.environ["TFRING_SIZE"]), int(os.environ["TFRING_RANK"])
        tf.data.Dataset.batch = lambda self, b, *args, **kwargs: original_batch(self.shard(n, r), b, *args, **kwargs)
    else:
        import tfring.runtime
        tfring.runtime.size = lambda: int(twin)
        tf.data.Dataset.batch = lambda self, b, *args, **kwargs: original_batch(self, b * int(twin), *args, **kwargs)

if cap:
    original_fit, original_take = keras.Model.fit, tf.data.Dataset.take
    def capped_fit(self, *args, **kwargs):
        kwargs["epochs"] = min(kwargs.get("epochs", 1), 2)
        kwargs["steps_per_epoch"] = min(kwargs.get("steps_per_epoch") or cap, cap)
        return original_fit(self, *args, **kwargs)
    keras.Model.fit = capped_fit
    tf.data.Dataset.take = lambda self, count, name=None: original_take(self, min(int(count), cap), name)

change = os.environ.get("EXAMPLE_CHANGE")  # --elastic K: after K batches, "lose" rank 1 and its slot, or "grow"
if change:
    import signal, time
    import tfring.elastic
    batches, after = [0], int(os.environ["EXAMPLE_AFTER"])
    class ChangeHosts(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            batches[0] += 1
            if change == "grow":
                time.sleep(0.3)  # (time for the launcher to see the new slot before the job ends)
            if os.environ["TFRING_RESTART"] != "0" or batches[0] != after:
                return
            if change == "lose" and os.environ["TFRING_RANK"] == "1":
                with open(os.environ["HOSTS"], "w") as f:
                    f.write("localhost:1\n")
                os.kill(os.getpid(), signal.SIGKILL)
            if change == "grow":
                with open(os.environ["HOSTS"], "w") as f:
                    f.write("localhost:2\n")
    fit_before = keras.Model.fit
    def fit_changing(self, *args, **kwargs):
        kwargs["callbacks"] = list(kwargs.get("callbacks") or []) + [ChangeHosts()]
        return fit_before(self, *args, **kwargs)
    keras.Model.fit = fit_changing
    reset_before = tfring.elastic.State.on_reset
    def reset_said(self):
        print(f"== reset on {tfring.size()} rank(s) at epoch {self.epoch} batch {self.batch}", flush=True)
        reset_before(self)
    tfring.elastic.State.on_reset = reset_said

def dump():
    rank = os.environ.get("TFRING_RANK", "0")
    for k, model in enumerate(models):
        if model.trainable_weights:  # BatchNormalization's moving statistics stay each rank's own
            np.save(f"{out}/model{k}-rank{rank}.npy",
                    np.concatenate([np.ravel(w.numpy()) for w in model.trainable_weights]))
atexit.register(dump)

sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
'''


def offline_mnist(path):
    """scikit-learn's digits as MNIST's (x_train, y_train), (x_test, y_test) npz: 28x28 uint8."""
    from sklearn.datasets import load_digits
    digits = load_digits()
    images = np.kron(digits.images, np.ones((3, 3))) * (255.0 / 16.0)  # 24x24
    images = np.pad(images, ((0, 0), (2, 2), (2, 2))).round().astype(np.uint8)
    labels = digits.target.astype(np.uint8)
    np.savez(path, x_train=images[:1500], y_train=labels[:1500], x_test=images[1500:], y_test=labels[1500:])


def prepare(folder):
    """The examples with their import lines and Keras 3 removals rewritten; returns the changes made."""
    changes = []
    for path in sorted(glob.glob(os.path.join(EXAMPLES, "*.py")) + [os.path.join(EXAMPLES, "elastic", ELASTIC)]):
        text = open(path).read()
        for pattern, replacement in REWRITES:
            text, n = pattern.subn(replacement, text)
            changes += [(os.path.basename(path), "import line")] * n
        for pattern, replacement, why in KERAS3:
            text, n = pattern.subn(replacement, text)
            changes += [(os.path.basename(path), why)] * n
        with open(os.path.join(folder, os.path.basename(path)), "w") as f:
            f.write(text)
    with open(os.path.join(folder, "example_runner.py"), "w") as f:
        f.write(RUNNER)
    offline_mnist(os.path.join(folder, "mnist.npz"))
    return changes


def run_one(name, np_, folder, max_steps, timeout, twin="", floatx="float32"):
    """Runs one example on `np_` ranks (`twin`: see the module docstring; "N" runs one plain process);
    returns (exit code, log text, {model: [weights per rank]})."""
    out = os.path.join(folder, name[:-3] + (f"-twin{twin}-{floatx}" if twin else ""))
    os.makedirs(out)
    command = [sys.executable, os.path.join(folder, "example_runner.py"), os.path.join(folder, name)] + ARGS.get(name, [])
    cmd, env = tfring_job(np_, command, EXAMPLE_OUT=out, EXAMPLE_MAX_STEPS=str(max_steps or 0), EXAMPLE_TWIN=twin, EXAMPLE_FLOATX=floatx,
                          OFFLINE_MNIST=os.path.join(folder, "mnist.npz"))
    if twin not in ("", "job"):
        cmd = command
    try:
        done = subprocess.run(cmd, cwd=out, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=timeout)
        code, log = done.returncode, done.stdout
    except subprocess.TimeoutExpired as e:
        code, log = "timeout", (e.stdout or b"").decode(errors="replace")
    weights = {}
    for path in sorted(glob.glob(os.path.join(out, "model*-rank*.npy"))):
        model, rank = re.match(r"(model\d+)-rank(\d+)\.npy", os.path.basename(path)).groups()
        weights.setdefault(model, {})[int(rank)] = np.load(path)
    return code, log, weights


def run_elastic(folder, max_steps, timeout, after, change):
    """Runs ELASTIC as an elastic job on up to 2 ranks of this host which, after `after` batches,
    loses rank 1 and its slot (`change` "lose") or is offered a second slot ("grow"); True when it
    ended well after starting again on the slots there, from its commit."""
    out = os.path.join(folder, f"elastic-{change}")
    os.makedirs(out)
    hosts, discover = os.path.join(out, "hosts"), os.path.join(out, "discover.sh")
    before, then = (2, 1) if change == "lose" else (1, 2)
    with open(hosts, "w") as f:
        f.write(f"localhost:{before}\n")
    with open(discover, "w") as f:
        f.write(f"#!/bin/sh\ncat {hosts}\n")
    os.chmod(discover, 0o700)
    command = [sys.executable, os.path.join(folder, "example_runner.py"), os.path.join(folder, ELASTIC)]
    cmd, env = tfring_job(2, command, EXAMPLE_OUT=out, EXAMPLE_MAX_STEPS=str(max_steps or 0), EXAMPLE_CHANGE=change,
                          EXAMPLE_AFTER=str(after), HOSTS=hosts, OFFLINE_MNIST=os.path.join(folder, "mnist.npz"))
    cmd[cmd.index("-np"):cmd.index("-np") + 2] = ["--min-np", "1", "--max-np", "2", "--host-discovery-script",
                                                  discover, "--blacklist-cooldown-range", "0.1", "0.1"]
    try:
        done = subprocess.run(cmd, cwd=out, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=timeout)
        code, log = done.returncode, done.stdout
    except subprocess.TimeoutExpired as e:
        code, log = "timeout", (e.stdout or b"").decode(errors="replace")
    resets = [line.split("== ", 1)[1] for line in log.splitlines() if "== reset on" in line]
    what = "rank 1 lost" if change == "lose" else "a second slot offered"
    print(f"== {ELASTIC} (elastic, {what} after {after} batches): exit {code}; {'; '.join(resets) or 'no reset'}")
    print("\n".join(line for line in log.splitlines() if line.startswith("tfring run:")))
    if code != 0:
        print("\n".join(log.splitlines()[-20:]))
    return code == 0 and bool(resets) and all(r.startswith(f"reset on {then} rank(s)") for r in resets)  # (rank 0's)


TWINNED = "tensorflow2_keras_mnist.py"
TOLERANCE = {"float32": 1e-5, "float64": 1e-12}


def compare_one_process(np_, folder, max_steps, timeout, floatx):
    """Runs TWINNED as a job and as one process on np_ x its batch (module docstring), with Keras'
    float type `floatx`; True when the job's ranks are bit-identical and within TOLERANCE of the one
    process."""
    code, log, job = run_one(TWINNED, np_, folder, max_steps, timeout, twin="job", floatx=floatx)
    code_alone, log_alone, alone = run_one(TWINNED, 1, folder, max_steps, timeout, twin=str(np_), floatx=floatx)
    if code != 0 or code_alone != 0 or set(job) != set(alone) or not job:
        print(f"== {TWINNED} against one process: exit {code} (job), {code_alone} (one process)")
        print("\n".join((log + log_alone).splitlines()[-20:]))
        return False
    identical = all(np.array_equal(per_rank[0], w) for per_rank in job.values() for w in per_rank.values())
    differ = max(float(np.abs(job[m][0] - alone[m][0]).max()) for m in job)
    print(f"== {TWINNED} against one process on {np_} x the batch (dropout off, {floatx}): ranks bit-identical: "
          f"{identical}; max |dw| = {differ:.3g} (tolerance {TOLERANCE[floatx]:g})")
    return identical and differ <= TOLERANCE[floatx]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--max-steps", type=int, default=0, help="cap fit's epochs (2) and steps, and Dataset.take")
    parser.add_argument("--only", nargs="*", default=None, help="example file names (none: only the comparison)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per example")
    parser.add_argument("--compare-one-process", action="store_true",
                        help=f"check {TWINNED}'s job against one process on N x the batch (dropout off)")
    parser.add_argument("--elastic", type=int, default=0, metavar="K",
                        help=f"run {ELASTIC} as an elastic job on up to 2 ranks, changing its hosts after K batches")
    parser.add_argument("--elastic-change", choices=("lose", "grow"), default="lose",
                        help="with --elastic: lose rank 1 and its slot (from 2 ranks), or offer a second slot (from 1)")
    parser.add_argument("--floatx", choices=sorted(TOLERANCE), default="float32",
                        help="Keras' float type in the comparison (float64 leaves out float32's rounding)")
    args = parser.parse_args(argv)
    folder = tempfile.mkdtemp(prefix="tfring-horovod-examples-")
    ok = True
    try:
        changes = prepare(folder)
        for name, why in changes:
            print(f"{name}: rewrote {why}")
        names = args.only if args.only is not None else sorted(
            os.path.basename(p) for p in glob.glob(os.path.join(EXAMPLES, "*.py")))  # `--only` alone: none
        for name in names:
            code, log, weights = run_one(name, args.np, folder, args.max_steps, args.timeout)
            identical = bool(weights) and all(
                len(per_rank) == args.np and all(np.array_equal(per_rank[0], w) for w in per_rank.values())
                for per_rank in weights.values())
            print(f"== {name}: exit {code}; {len(weights)} model(s); ranks' weights bit-identical: {identical}")
            print("\n".join(log.splitlines()[-12:]))
            ok = ok and code == 0 and identical
        if args.elastic:
            ok = run_elastic(folder, args.max_steps, args.timeout, args.elastic, args.elastic_change) and ok
        if args.compare_one_process:
            ok = compare_one_process(args.np, folder, args.max_steps, args.timeout, args.floatx) and ok
        return 0 if ok else 1
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
