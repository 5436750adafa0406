"""Elastic jobs: an ordinary Keras script with `BackupAndRestore`, started by `tfring run --min-np`,
loses a rank mid-epoch (SIGKILL) and its slot, or is offered a second slot, starts again on the
slots there, and ends with the weights of the uninterrupted one-process run (SGD with momentum and
Adam)."""

import os
import subprocess
import sys

import numpy as np
import pytest

from tfring_dev.testing import QUIET_ENV

pytestmark = pytest.mark.multiprocess

FIT = r'''
import os, signal, time
import numpy as np
import tensorflow as tf
import keras
import tfring

tf.config.threading.set_intra_op_parallelism_threads(1)
rank, restart = int(os.environ.get("TFRING_RANK", "0")), int(os.environ.get("TFRING_RESTART", "0"))
keras.utils.set_random_seed(1)
rng = np.random.default_rng(0)
x = rng.standard_normal((240, 8)).astype("float32")
y = (x[:, :1] - 2 * x[:, 1:2]).astype("float32")
out, kind = os.environ["OUT"], os.environ["OPT"]
strategy = tfring.RingStrategy()
with strategy.scope():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9) if kind == "sgd" else keras.optimizers.Adam(0.01),
                  loss="mse")


class ChangeTheHosts(keras.callbacks.Callback):
    """At the first start, in the third epoch's third batch: SHRINK: rank 1 dies, and its slot with
    it; GROW: the host offers a second slot (the launcher ends the job within seconds)."""

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        time.sleep(float(os.environ.get("SLOW", "0")))  # (time for a test to act from outside)
        if "HOSTS" not in os.environ or restart != 0 or self.epoch != 2 or batch != 2:
            return
        if os.environ["CHANGE"] == "shrink" and rank == 1:
            with open(os.environ["HOSTS"], "w") as f:
                f.write("localhost:1\n")
            os.kill(os.getpid(), signal.SIGKILL)
        if os.environ["CHANGE"] == "grow":
            with open(os.environ["HOSTS"], "w") as f:
                f.write("localhost:2\n")
            time.sleep(60)


backup = os.path.join(out, f"backup-{kind}-{'job' if 'HOSTS' in os.environ else 'alone'}")
model.fit(x, y, batch_size=48, epochs=4, shuffle=False, verbose=0,
          callbacks=[keras.callbacks.BackupAndRestore(backup), ChangeTheHosts()])
tag = f"{kind}-{'job' if 'HOSTS' in os.environ else 'alone'}-r{restart}-{rank}of{strategy.size}"
np.save(os.path.join(out, f"w-{tag}.npy"), np.concatenate([v.numpy().ravel() for v in model.weights]))
'''


def env_of(**extra):
    """The environment of a test's processes: no variable of an enclosing job, quiet, `extra` added."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TFRING_")}
    return {**env, **QUIET_ENV, **extra}


def alone_first(tmp_path, source, env):
    """Writes the script `source` and runs it as one process (the uninterrupted run); returns its path."""
    script = tmp_path / "train.py"
    script.write_text(source)
    alone = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert alone.returncode == 0, alone.stderr[-3000:]
    return script


def discovery(tmp_path, slots):
    """A host list of this host with `slots` slots, and the discovery script that prints it."""
    hosts, discover = tmp_path / "hosts", tmp_path / "discover.sh"
    hosts.write_text(f"localhost:{slots}\n")
    discover.write_text(f"#!/bin/sh\ncat {hosts}\n")
    discover.chmod(0o700)
    return hosts, discover


@pytest.mark.parametrize("change,kind", [("shrink", "sgd"), ("shrink", "adam"), ("grow", "sgd")])
def test_a_fit_whose_hosts_change_mid_epoch_goes_on_to_the_uninterrupted_weights(tmp_path, change, kind):
    script = alone_first(tmp_path, FIT, env_of(OUT=str(tmp_path), OPT=kind))
    before, after = (2, 1) if change == "shrink" else (1, 2)
    hosts, discover = discovery(tmp_path, before)
    job = subprocess.run([sys.executable, "-m", "tfring", "run", "--min-np", "1", "--max-np", "2",
                          "--host-discovery-script", str(discover), "--blacklist-cooldown-range", "0.1", "0.1",
                          sys.executable, str(script)], capture_output=True, text=True, timeout=600,
                         env=env_of(OUT=str(tmp_path), OPT=kind, HOSTS=str(hosts), CHANGE=change))
    assert job.returncode == 0, job.stderr[-3000:]
    said = {"shrink": "rank 1 was killed by SIGKILL; host localhost kept out for 0.1 s; starting the job again",
            "grow": "the hosts now offer 2 ranks where the job runs 1: starting it again on them, once the ranks stop"}[change]
    assert said in job.stderr, job.stderr[-3000:]
    assert not (tmp_path / f"w-{kind}-job-r0-0of{before}.npy").exists()  # the first membership did not finish
    one = np.load(tmp_path / f"w-{kind}-alone-r0-0of1.npy")
    for r in range(after):  # started again on the slots there now, from the last epoch's backup
        resumed = np.load(tmp_path / f"w-{kind}-job-r1-{r}of{after}.npy")
        # Epochs 0-1 on one number of ranks, 2-3 on the other: the global batch never changed.
        assert np.max(np.abs(resumed - one)) <= 1e-5, np.max(np.abs(resumed - one))
