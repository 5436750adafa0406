"""SIGKILL a rank at a random moment of a 2-rank fit, then check what it left behind.

    python benchmarks/kill_resume.py [--trials 21] [--seed 0]

Three ways of saving, taken in turn: BackupAndRestore (then the job is run again and must end with
exactly the weights of an uninterrupted run), ModelCheckpoint of weights after every epoch, and
model.save after every epoch (every file left must load). The moment of the kill is uniform over
the training time of an uninterrupted run, and the victim is rank 0 or 1 at random. Prints one line
per trial and a table per way of saving.
"""

import argparse
import collections
import glob
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

EPOCHS = 6
TRAIN = r'''
import os, sys
import numpy as np
import tensorflow as tf
import keras
import tfring

mode, out = sys.argv[1], sys.argv[2]
tf.config.threading.set_intra_op_parallelism_threads(1)
strategy = tfring.RingStrategy()
keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.standard_normal((512, 6)).astype("float32")
y = (x @ rng.standard_normal((6, 1))).astype("float32")
with strategy.scope():
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(32, activation="tanh"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.02, momentum=0.9), loss="mse")

class Saver(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        self.model.save(os.path.join(out, "saves", f"e{epoch}.keras"))

callbacks = {
    "backup": lambda: [keras.callbacks.BackupAndRestore(os.path.join(out, "backup"))],
    "checkpoint": lambda: [keras.callbacks.ModelCheckpoint(os.path.join(out, "ckpt", "e{epoch}.weights.h5"),
                                                           save_weights_only=True)],
    "save": lambda: [Saver()],
}[mode]()
print("TRAINING", flush=True)
model.fit(x, y, batch_size=32, epochs=%d, verbose=0, shuffle=False, callbacks=callbacks)
np.save(os.path.join(out, f"final{strategy.rank}.npy"), np.concatenate([w.ravel() for w in model.get_weights()]))
''' % EPOCHS


def _job(script, mode, out):
    env = dict(os.environ, TF_NUM_INTRAOP_THREADS="1", TF_NUM_INTEROP_THREADS="2", OMP_NUM_THREADS="1",
               TFRING_TIMEOUT="20")
    return subprocess.Popen([sys.executable, "-m", "tfring", "run", "-np", "2", sys.executable, script, mode, out],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            start_new_session=True)


def _wait_training(proc):
    while True:
        line = proc.stdout.readline()
        if not line or "TRAINING" in line:
            return bool(line)


def _rank_pid(launcher_pid, rank):
    with open(f"/proc/{launcher_pid}/task/{launcher_pid}/children") as f:
        for pid in f.read().split():
            try:
                with open(f"/proc/{pid}/environ", "rb") as env:
                    if b"\0TFRING_RANK=%d\0" % rank in b"\0" + env.read():
                        return int(pid)
            except FileNotFoundError:
                pass
    return None


def _run_through(script, mode, out):
    """Runs a job to its end; returns (exit code, seconds of training)."""
    proc = _job(script, mode, out)
    _wait_training(proc)
    start = time.monotonic()
    proc.stdout.read()
    return proc.wait(), time.monotonic() - start


def _model():
    import keras

    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(32, activation="tanh"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.02, momentum=0.9), loss="mse")
    return model


def _loadable(mode, out):
    """(files found, files that load) among what the killed job saved."""
    import keras

    paths = sorted(glob.glob(os.path.join(out, "ckpt", "e*.weights.h5")) + glob.glob(os.path.join(out, "saves", "e*.keras")))
    loaded = 0
    for path in paths:
        try:
            if path.endswith(".keras"):
                keras.models.load_model(path)
            else:
                _model().load_weights(path)
            loaded += 1
        except Exception as e:  # counted and shown: a file that does not load is a failure
            print(f"    does not load: {path}: {type(e).__name__}: {str(e)[:200]}")
    return len(paths), loaded


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=21)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    import numpy as np

    rng = random.Random(args.seed)
    root = tempfile.mkdtemp(prefix="tfring-kill-")
    script = os.path.join(root, "train.py")
    with open(script, "w") as f:
        f.write(TRAIN)
    modes = ("backup", "checkpoint", "save")
    reference, duration = {}, {}
    for mode in modes:
        out = os.path.join(root, f"straight-{mode}")
        code, duration[mode] = _run_through(script, mode, out)
        assert code == 0, f"uninterrupted {mode} run failed ({code})"
        reference[mode] = np.load(os.path.join(out, "final0.npy"))
    stats = collections.defaultdict(collections.Counter)
    for trial in range(args.trials):
        mode, victim = modes[trial % 3], rng.randrange(2)
        delay = rng.uniform(0, duration[mode])
        out = os.path.join(root, f"trial{trial}")
        proc = _job(script, mode, out)
        _wait_training(proc)
        time.sleep(delay)
        pid = _rank_pid(proc.pid, victim)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
        proc.stdout.read()
        code = proc.wait()
        s = stats[mode]
        s["trials"] += 1
        if code == 0:
            s["finished before the kill"] += 1
            verdict = "finished before the kill"
        else:
            s["killed"] += 1
            found, loaded = _loadable(mode, out)
            s["files left"] += found
            s["files that load"] += loaded
            verdict = f"killed (exit {code}); {loaded}/{found} saved files load"
            if mode == "backup":
                again, _ = _run_through(script, mode, out)
                same = again == 0 and np.array_equal(np.load(os.path.join(out, "final0.npy")), reference[mode])
                s["resumed equal to uninterrupted"] += int(same)
                verdict += "; resumed run " + ("equals the uninterrupted one" if same else f"DIFFERS (exit {again})")
        print(f"trial {trial:2d} {mode:10s} rank {victim} at {delay:5.2f} s of {duration[mode]:.1f} s: {verdict}",
              flush=True)
        shutil.rmtree(out, ignore_errors=True)
    print()
    print("| saving | trials | killed mid-run | finished first | resumed = uninterrupted | saved files that load |")
    print("| --- | --- | --- | --- | --- | --- |")
    for mode in modes:
        s = stats[mode]
        resumed = f"{s['resumed equal to uninterrupted']}/{s['killed']}" if mode == "backup" else "n/a"
        print(f"| {mode} | {s['trials']} | {s['killed']} | {s['finished before the kill']} | {resumed} | "
              f"{s['files that load']}/{s['files left']} |")
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
