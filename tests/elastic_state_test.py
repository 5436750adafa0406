"""`tfring.elastic`: a `fit` with `CommitCallback` and a custom loop with `State.commit()`, started by
`tfring run --min-np 1 --max-np 2`, lose rank 1 (SIGKILL) and its slot between two commits; the job
starts again on one rank from the newest commit the hosts keep (mid-epoch: `fit` skips the batches the
commit holds), runs the reset callbacks, and ends with the weights of the uninterrupted one-process
run (SGD with momentum and Adam), leaving no commit behind; also with the optimizer's state sharded
(3 ranks, then 2). Offered a second slot, a job of one rank stops at its next commit and goes on on
two, to the same weights."""

import os
import subprocess
import sys

import numpy as np
import pytest

from elastic_test import alone_first
from elastic_test import discovery
from elastic_test import env_of

pytestmark = pytest.mark.multiprocess

SCRIPT = r'''
import os, signal, time
import numpy as np
import tensorflow as tf
import keras
import tfring

tf.config.threading.set_intra_op_parallelism_threads(1)
print(f"started pid {os.getpid()}", flush=True)
restarts = lambda: int(os.environ.get("TFRING_RESTART", "0"))  # (now: ranks that go on in place change it)
out, kind, mode = os.environ["OUT"], os.environ["OPT"], os.environ["MODE"]
epochs = int(os.environ.get("EPOCHS", "4"))
keras.utils.set_random_seed(1)
rng = np.random.default_rng(0)
x = rng.standard_normal((240, 8)).astype("float32")
y = (x[:, :1] - 2 * x[:, 1:2]).astype("float32")
strategy = tfring.RingStrategy(shard_optimizer_state=os.environ.get("SHARD") == "1")
with strategy.scope():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(0.05, momentum=0.9) if kind == "sgd" else keras.optimizers.Adam(0.01)
    model.compile(optimizer=optimizer, loss="mse")


def change_hosts(at):
    """At the first start, once `at` is true: CHANGE=lose: rank 1's slot goes, then it dies;
    CHANGE=grow: the host offers one slot more."""
    time.sleep(float(os.environ.get("SLOW", "0")))  # (time for a test, or the launcher, to act)
    if restarts() != 0 or not at:
        return
    if os.environ.get("CHANGE") == "lose" and strategy.rank == 1:
        with open(os.environ["HOSTS"], "w") as f:
            f.write(f"localhost:{strategy.size - 1}\n")
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get("CHANGE") == "grow":
        with open(os.environ["HOSTS"], "w") as f:
            f.write(f"localhost:{strategy.size + 1}\n")


state = tfring.elastic.State(model, epoch=0, batch=0, step=0)
state.register_reset_callbacks([lambda: print(f"reset: {tfring.size()} rank(s) from epoch {state.epoch} "
                                              f"batch {state.batch} step {state.step}", flush=True)])


class ChangeHosts(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        change_hosts(self.epoch == 2 and batch == 2)  # (commits after batches 2 and 4 of each epoch: 1 and 3)


@tfring.elastic.run
def fit(state):
    model.fit(x, y, batch_size=48, epochs=epochs, initial_epoch=state.epoch, shuffle=False, verbose=0,
              callbacks=[tfring.elastic.CommitCallback(state, save_freq=2), ChangeHosts()])


def make_step():
    @tf.function
    def train_step(xb, yb):
        def step(xb, yb):
            with tf.GradientTape() as tape:
                loss = keras.ops.mean(keras.ops.square(model(xb, training=True) - yb))
            optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))

        strategy.run(step, args=(xb, yb))
    return train_step


@tfring.elastic.run
def loop(state):
    # The step traced for the ranks there are now (ranks that go on in place call this again), and
    # the input from the state's step, split over them.
    train_step = make_step()
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(48).repeat().skip(state.step)
    batches = iter(strategy.experimental_distribute_dataset(data))
    while state.step < 5 * epochs:
        train_step(*next(batches))
        state.step += 1
        if state.step % 2 == 0:
            state.commit()
        change_hosts(state.step == 11)


{"fit": fit, "loop": loop}[mode](state)
tag = f"{mode}-{kind}-{'job' if 'TFRING_RESTART' in os.environ else 'alone'}-r{restarts()}-{strategy.rank}of{strategy.size}"
np.save(os.path.join(out, f"w-{tag}.npy"), np.concatenate([v.numpy().ravel() for v in model.weights]))
'''


@pytest.mark.parametrize("mode,kind", [("fit", "sgd"), ("fit", "adam"), ("loop", "sgd")])
def test_a_state_committed_between_failures_goes_on_to_the_uninterrupted_weights(tmp_path, mode, kind):
    script = alone_first(tmp_path, SCRIPT, env_of(OUT=str(tmp_path), OPT=kind, MODE=mode))
    hosts, discover = discovery(tmp_path, 2)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    job = subprocess.run([sys.executable, "-m", "tfring", "run", "--min-np", "1", "--max-np", "2",
                          "--host-discovery-script", str(discover), "--blacklist-cooldown-range", "0.1", "0.1",
                          sys.executable, str(script)], capture_output=True, text=True, timeout=600,
                         env=env_of(OUT=str(tmp_path), OPT=kind, MODE=mode, HOSTS=str(hosts), CHANGE="lose",
                                  TMPDIR=str(scratch)))
    assert job.returncode == 0, job.stderr[-3000:]
    assert "rank 1 was killed by SIGKILL" in job.stderr, job.stderr[-3000:]
    # From the newest commit (the hosts keep it: no checkpoint of the user's), after the reset callbacks:
    resumed = {"fit": "from epoch 2 batch 2 step 0", "loop": "from epoch 0 batch 0 step 10"}[mode]
    assert f"reset: 1 rank(s) {resumed}" in job.stdout, job.stdout[-3000:]
    one = np.load(tmp_path / f"w-{mode}-{kind}-alone-r0-0of1.npy")
    went_on = np.load(tmp_path / f"w-{mode}-{kind}-job-r1-0of1.npy")
    assert np.max(np.abs(went_on - one)) <= 1e-5, np.max(np.abs(went_on - one))
    kept = scratch / f"tfring-{os.geteuid()}"
    assert kept.stat().st_mode & 0o077 == 0 and list(kept.iterdir()) == []  # private, and emptied at the end



@pytest.mark.parametrize("mode", ["fit", "loop"])
def test_new_slots_join_at_the_next_commit_and_the_weights_stay_those_of_one_process(tmp_path, mode):
    # One rank; mid-epoch the host offers a second slot: the launcher tells the ranks, they stop
    # together at their next commit (no step is done twice), and the job goes on on two from it.
    env = env_of(OUT=str(tmp_path), OPT="sgd", MODE=mode, EPOCHS="8")
    script = alone_first(tmp_path, SCRIPT, env)
    hosts, discover = discovery(tmp_path, 1)
    job = subprocess.run([sys.executable, "-m", "tfring", "run", "--min-np", "1", "--max-np", "2",
                          "--host-discovery-script", str(discover), sys.executable, str(script)],
                         capture_output=True, text=True, timeout=600,
                         env={**env, "HOSTS": str(hosts), "CHANGE": "grow", "SLOW": "0.3", "TMPDIR": str(tmp_path)})
    assert job.returncode == 0, job.stderr[-3000:]
    assert ("the hosts now offer 2 ranks where the job runs 1: starting it again on them, once the ranks stop at "
            "their next commit") in job.stderr, job.stderr[-3000:]
    assert "stopping at the next commit (tfring.elastic)" in job.stderr
    assert "tfring run: the ranks stopped at a commit" in job.stderr, job.stderr[-3000:]
    assert "the job ended well after 0 failures and 1 resize" in job.stderr
    assert "reset: 2 rank(s) from" in job.stdout, job.stdout[-3000:]
    one = np.load(tmp_path / f"w-{mode}-sgd-alone-r0-0of1.npy")
    for r in range(2):
        went_on = np.load(tmp_path / f"w-{mode}-sgd-job-r1-{r}of2.npy")
        assert np.max(np.abs(went_on - one)) <= 1e-5, np.max(np.abs(went_on - one))



def test_a_sharded_optimizer_state_is_committed_whole_and_shared_out_again_at_the_new_size(tmp_path):
    # shard_optimizer_state on 3 ranks, Adam; rank 1 dies between two commits: the commit holds every
    # slot whole (each from its owner), and the 2 ranks left each take the slots they now own.
    env = env_of(OUT=str(tmp_path), OPT="adam", MODE="fit", SHARD="1")
    script = alone_first(tmp_path, SCRIPT, env)
    hosts, discover = discovery(tmp_path, 3)
    job = subprocess.run([sys.executable, "-m", "tfring", "run", "--min-np", "1", "--max-np", "3",
                          "--host-discovery-script", str(discover), "--blacklist-cooldown-range", "0.1", "0.1",
                          sys.executable, str(script)], capture_output=True, text=True, timeout=600,
                         env={**env, "HOSTS": str(hosts), "CHANGE": "lose", "TMPDIR": str(tmp_path)})
    assert job.returncode == 0, job.stderr[-3000:]
    assert "reset: 2 rank(s) from epoch 2 batch 2" in job.stdout, job.stdout[-3000:]
    one = np.load(tmp_path / "w-fit-adam-alone-r0-0of1.npy")
    for r in range(2):
        went_on = np.load(tmp_path / f"w-fit-adam-job-r1-{r}of2.npy")
        assert np.max(np.abs(went_on - one)) <= 1e-5, np.max(np.abs(went_on - one))
