"""`tfring.elastic`: a job that loses a rank goes on in the survivors' processes.

The ranks' half, with the launcher's played here (`ScriptedLauncher`): it starts 3 ranks with the
variables and the launcher pipe `tfring run` gives them, offering in-place re-forming
(`TFRING_REFORM_SECONDS`); rank 2 SIGKILLs itself mid-epoch, between two commits. The survivors'
collective fails, each says on stderr that it waits for the job's next ranks, and the test writes
each its new membership (2 ranks, a new store and job id) on its pipe, as the launcher does. The
survivors re-form the ring in their processes, resume from the commit they hold in memory, and end
with the weights of the uninterrupted one-process run (SGD with momentum and Adam; `fit` with
`CommitCallback`, and a custom loop whose `tf.function` is made inside the function `run` calls).
A step traced for 3 ranks and run by the 2 fails, saying to trace it again.

Then the whole: `tfring run --min-np 2` loses rank 2, or rank 0 (and the store with it), and goes
on with the two ranks left in their processes (tests/multihost_test.py does it across emulated
hosts, a host cut off)."""

import os
import secrets
import subprocess
import sys
import time

import numpy as np
import pytest

from elastic_test import alone_first
from elastic_test import discovery
from elastic_test import env_of
from tfring.launch import addresses
from tfring.launch import membership
from tfring.launch import variables

pytestmark = pytest.mark.multiprocess

SCRIPT = r'''
import os, signal, time
import numpy as np
import tensorflow as tf
import keras
import tfring

tf.config.threading.set_intra_op_parallelism_threads(1)
print(f"started pid {os.getpid()}", flush=True)
out, kind, mode = os.environ["OUT"], os.environ["OPT"], os.environ["MODE"]
if "UNSEEDED" not in os.environ:
    keras.utils.set_random_seed(1)
rng = np.random.default_rng(0)
x = rng.standard_normal((240, 8)).astype("float32")
y = (x[:, :1] - 2 * x[:, 1:2]).astype("float32")
strategy = tfring.RingStrategy()
with strategy.scope():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(0.05, momentum=0.9) if kind == "sgd" else keras.optimizers.Adam(0.01)
    model.compile(optimizer=optimizer, loss="mse")
state = tfring.elastic.State(model, epoch=0, batch=0, step=0)
state.register_reset_callbacks([lambda: print(f"reset: {tfring.size()} rank(s) from epoch {state.epoch} "
                                              f"batch {state.batch} step {state.step}", flush=True)])


def maybe_die(at):
    if at and "GROW" not in os.environ and strategy.size == 3 and strategy.rank == int(os.environ.get("LOST", "2")):
        if "HOSTS" in os.environ:  # (under tfring run: its slot goes with it)
            with open(os.environ["HOSTS"], "w") as f:
                f.write("localhost:2\n")
        os.kill(os.getpid(), signal.SIGKILL)


def maybe_wait_for_growth(at):
    # The test tells the 2 ranks, once both wait here, that the job may grow; they stop together
    # at their next commit.
    if at and "GROW" in os.environ and strategy.size == 2:
        print("waiting for growth", flush=True)
        if "HOSTS" in os.environ and strategy.rank == 0:  # (under tfring run: a third slot)
            with open(os.environ["HOSTS"], "w") as f:
                f.write("localhost:3\n")
        for _ in range(600):
            if tfring.runtime.hosts_updated():
                return
            time.sleep(0.1)
        raise TimeoutError("never told that the job may grow")


class Die(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        maybe_die(self.epoch == 2 and batch == 2)  # (commits after batches 1 and 3 of each epoch)
        maybe_wait_for_growth(self.epoch == 1 and batch == 0)


@tfring.elastic.run
def fit(state):
    # (A dataset's batches have no static row count: only resetting Keras' traced train function
    # makes the step take the new number of ranks.)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(48)
    model.fit(data, epochs=4, initial_epoch=state.epoch, shuffle=False, verbose=0,
              callbacks=[tfring.elastic.CommitCallback(state, save_freq=2), Die()])


def make_step():
    spec = [tf.TensorSpec([None, 8]), tf.TensorSpec([None, 1])] if os.environ.get("STALE") == "1" else None

    @tf.function(input_signature=spec)  # (a batch of any rows: traced once, for the first number of ranks)
    def train_step(xb, yb):
        def step(xb, yb):
            with tf.GradientTape() as tape:
                loss = keras.ops.mean(keras.ops.square(model(xb, training=True) - yb))
            optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))

        strategy.run(step, args=(xb, yb))
    return train_step


stale = make_step()


@tfring.elastic.run
def loop(state):
    train_step = stale if os.environ.get("STALE") == "1" else make_step()
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(48).repeat().skip(state.step)
    batches = iter(strategy.experimental_distribute_dataset(data))
    while state.step < 20:
        train_step(*next(batches))
        state.step += 1
        maybe_wait_for_growth(state.step == 5)
        if state.step % 2 == 0:
            state.commit()
        maybe_die(state.step == 11)


{"fit": fit, "loop": loop}[mode](state)
tag = f"{mode}-{kind}-{'job' if 'TFRING_RANK' in os.environ else 'alone'}-{strategy.rank}of{strategy.size}"
np.save(os.path.join(out, f"w-{tag}.npy"), np.concatenate([v.numpy().ravel() for v in model.weights]))
print("finished", flush=True)
'''


class ScriptedLauncher:
    """Starts ranks as `tfring run` does (variables and a launcher pipe), and writes memberships."""

    def __init__(self, tmp_path, script, env):
        self.tmp_path, self.script, self.env = tmp_path, script, env
        self.secret, self.elastic_id = secrets.token_hex(32), secrets.token_hex(6)
        self.ranks = {}  # rank -> (Popen, pipe write end)

    def identity(self, rank, size, restart):
        return {"TFRING_RANK": str(rank), "TFRING_SIZE": str(size), "TFRING_LOCAL_RANK": str(rank),
                "TFRING_LOCAL_SIZE": str(size), "TFRING_STORE_ADDR": f"127.0.0.1:{addresses.free_port()}",
                "TFRING_JOB_ID": secrets.token_hex(6), "TFRING_RESTART": str(restart)}

    def start(self, size):
        job = self.identity(0, size, 0)
        for rank in range(size):
            self.spawn(rank, {**job, "TFRING_RANK": str(rank), "TFRING_LOCAL_RANK": str(rank)})

    def spawn(self, rank, identity):
        read_end, write_end = os.pipe()
        env = {**self.env, **identity, "TFRING_SECRET": self.secret, "TFRING_ELASTIC_ID": self.elastic_id,
               "TFRING_TIMEOUT": "30", "TFRING_LAUNCHER_FD": str(read_end), membership.REFORM_SECONDS: "120"}
        with open(self.log(rank, "out"), "w") as out, open(self.log(rank, "err"), "w") as err:
            proc = subprocess.Popen([sys.executable, str(self.script)], env=env, stdout=out, stderr=err,
                                    pass_fds=(read_end,), stdin=subprocess.DEVNULL)
        os.close(read_end)
        self.ranks[rank] = (proc, write_end)

    def join(self, rank, size):
        """Starts rank `rank` of a job growing to `size` ranks (all on this host), as a joining rank."""
        self.spawn(rank, {membership.JOINING: f"{rank} {size} {rank} {size}"})

    def tell_growth(self):
        for _, write_end in self.ranks.values():
            os.write(write_end, variables.GROW_NOTICE)

    def log(self, rank, stream):
        return self.tmp_path / f"rank{rank}.{stream}"

    def text(self, rank, stream):
        return self.log(rank, stream).read_text()

    def wait_for_line(self, rank, line, timeout):
        deadline = time.monotonic() + timeout
        while line not in self.text(rank, "err"):
            assert time.monotonic() < deadline, f"rank {rank} never said {line!r}: {self.text(rank, 'err')[-3000:]}"
            assert self.ranks[rank][0].poll() is None, f"rank {rank} exited: {self.text(rank, 'err')[-3000:]}"
            time.sleep(0.1)

    def reform(self, survivors):
        """Writes each survivor (old rank -> new rank, in order) its place in a job of them alone."""
        job = self.identity(0, len(survivors), 1)
        for new, old in enumerate(survivors):
            place = {**job, "TFRING_RANK": str(new), "TFRING_LOCAL_RANK": str(new)}
            os.write(self.ranks[old][1], membership.encode(place))

    def wait(self, timeout):
        deadline = time.monotonic() + timeout
        codes = {}
        for rank, (proc, _) in self.ranks.items():
            try:
                codes[rank] = proc.wait(max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                codes[rank] = None
        return codes

    def close(self):
        for proc, write_end in self.ranks.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
            os.close(write_end)


@pytest.fixture
def launcher_of(tmp_path):
    made = []

    def make(script, env):
        made.append(ScriptedLauncher(tmp_path, script, env))
        return made[-1]

    yield make
    for launcher in made:
        launcher.close()


def _lose_rank_2(launcher, timeout=240):
    launcher.start(3)
    assert launcher.ranks[2][0].wait(timeout) == -9, launcher.text(2, "err")[-3000:]
    for rank in (0, 1):
        launcher.wait_for_line(rank, membership.REFORM_WAIT, 60)
    launcher.reform([0, 1])
    return launcher.wait(timeout)


@pytest.mark.parametrize("mode,kind", [("fit", "sgd"), ("fit", "adam"), ("loop", "sgd")])
def test_survivors_go_on_in_their_processes_to_the_uninterrupted_weights(tmp_path, launcher_of, mode, kind):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = env_of(OUT=str(tmp_path), OPT=kind, MODE=mode, TMPDIR=str(scratch))
    launcher = launcher_of(alone_first(tmp_path, SCRIPT, env), env)
    codes = _lose_rank_2(launcher)
    assert codes == {0: 0, 1: 0, 2: -9}, [launcher.text(r, "err")[-2000:] for r in (0, 1)]
    resumed = {"fit": "from epoch 2 batch 2 step 0", "loop": "from epoch 0 batch 0 step 10"}[mode]
    for rank in (0, 1):
        out = launcher.text(rank, "out")
        assert out.count("started pid") == 1, out  # the same process from start to end
        assert f"reset: 2 rank(s) {resumed}" in out, out
        assert f"now rank {rank} of 2" in launcher.text(rank, "err")
    one = np.load(tmp_path / f"w-{mode}-{kind}-alone-0of1.npy")
    for rank in (0, 1):
        went_on = np.load(tmp_path / f"w-{mode}-{kind}-job-{rank}of2.npy")
        assert np.max(np.abs(went_on - one)) <= 1e-5, np.max(np.abs(went_on - one))
    assert list((scratch / f"tfring-{os.geteuid()}").iterdir()) == []  # the commits' copies removed at the end


def _grow_to_3(launcher, timeout=300, joining_env=None):
    """2 ranks, told mid-training that the job may grow, stop at their next commit and wait; a
    third rank starts as a joining rank (with `joining_env`, if given); once it waits too, all
    three get their membership."""
    launcher.start(2)
    for rank in (0, 1):
        wait_for_output(launcher, rank, "waiting for growth", 240)
    launcher.tell_growth()
    for rank in (0, 1):
        launcher.wait_for_line(rank, membership.REFORM_WAIT, 60)
    launcher.env = joining_env or launcher.env
    launcher.join(2, 3)
    launcher.wait_for_line(2, membership.REFORM_WAIT, 120)
    launcher.reform([0, 1, 2])
    return launcher.wait(timeout)


def wait_for_output(launcher, rank, line, timeout):
    deadline = time.monotonic() + timeout
    while line not in launcher.text(rank, "out"):
        assert time.monotonic() < deadline and launcher.ranks[rank][0].poll() is None, launcher.text(rank, "err")[-3000:]
        time.sleep(0.1)


@pytest.mark.parametrize("mode,kind", [("fit", "sgd"), ("fit", "adam"), ("loop", "sgd")])
def test_a_job_grows_in_its_processes_to_the_uninterrupted_weights(tmp_path, launcher_of, mode, kind):
    # The two ranks keep their processes; the third starts alone, joins at their commit, and
    # takes the state from their memory (its host holds no commit).
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = env_of(OUT=str(tmp_path), OPT=kind, MODE=mode, GROW="1", TMPDIR=str(scratch),
                 **{membership.GROWS_IN_PLACE: "1"})
    launcher = launcher_of(alone_first(tmp_path, SCRIPT, env), env)
    codes = _grow_to_3(launcher)
    assert codes == {0: 0, 1: 0, 2: 0}, [launcher.text(r, "err")[-2000:] for r in (0, 1, 2)]
    resumed = {"fit": "from epoch 1 batch 2 step 0", "loop": "from epoch 0 batch 0 step 6"}[mode]
    for rank in (0, 1, 2):
        out = launcher.text(rank, "out")
        assert out.count("started pid") == 1, out
        assert f"reset: 3 rank(s) {resumed}" in out, out
        assert f"now rank {rank} of 3" in launcher.text(rank, "err")
    assert "started to join the running job" in launcher.text(2, "err")
    one = np.load(tmp_path / f"w-{mode}-{kind}-alone-0of1.npy")
    for rank in (0, 1, 2):
        grown = np.load(tmp_path / f"w-{mode}-{kind}-job-{rank}of3.npy")
        assert np.max(np.abs(grown - one)) <= 1e-5, np.max(np.abs(grown - one))


def test_a_joining_rank_with_another_random_state_fails_the_job_saying_so(tmp_path, launcher_of):
    # The script seeds nothing on the joining rank: its NumPy state is not the one the two ranks
    # took from rank 0 at their start, so data made from it could differ. Every rank fails, naming it.
    scratch = tmp_path / "tmp"  # (the job fails: its commits stay in its temporary folder)
    scratch.mkdir()
    env = env_of(OUT=str(tmp_path), OPT="sgd", MODE="fit", GROW="1", TMPDIR=str(scratch),
                 **{membership.GROWS_IN_PLACE: "1"})
    (tmp_path / "train.py").write_text(SCRIPT)
    launcher = launcher_of(tmp_path / "train.py", env)
    codes = _grow_to_3(launcher, 120, joining_env={**env, "UNSEEDED": "1"})
    assert all(code not in (0, None) for code in codes.values()), codes
    for rank in (0, 1, 2):
        assert "ranks [2] took another than rank 0" in launcher.text(rank, "err"), launcher.text(rank, "err")[-2000:]


def test_a_step_traced_before_the_job_re_formed_fails_saying_to_trace_it_again(tmp_path, launcher_of):
    scratch = tmp_path / "tmp"  # (the job fails: its commits stay in its temporary folder)
    scratch.mkdir()
    env = env_of(OUT=str(tmp_path), OPT="sgd", MODE="loop", STALE="1", TMPDIR=str(scratch))
    (tmp_path / "train.py").write_text(SCRIPT)
    launcher = launcher_of(tmp_path / "train.py", env)
    codes = _lose_rank_2(launcher)
    assert codes[0] != 0 and codes[1] != 0
    assert "this step was traced for 3 ranks" in launcher.text(0, "err"), launcher.text(0, "err")[-3000:]


def test_without_the_launchers_offer_a_rank_that_lost_a_peer_exits(tmp_path):
    # A launcher that does not re-form jobs in place (no TFRING_REFORM_SECONDS): the survivors
    # fail as before, naming the lost peer, and never wait.
    env = env_of(OUT=str(tmp_path), OPT="sgd", MODE="fit")
    (tmp_path / "train.py").write_text(SCRIPT)
    job = subprocess.run([sys.executable, "-m", "tfring", "run", "-np", "3", sys.executable,
                          str(tmp_path / "train.py")], capture_output=True, text=True, timeout=300, env=env)
    assert job.returncode != 0
    assert membership.REFORM_WAIT not in job.stderr


@pytest.mark.parametrize("lost", [2, 0])
def test_tfring_run_goes_on_with_the_ranks_left_in_their_processes(tmp_path, lost):
    # Rank 2, or rank 0 (which serves the store), is killed and its slot goes: the launcher keeps
    # the two ranks left, renumbers them, gives them a new store, and they go on.
    env = env_of(OUT=str(tmp_path), OPT="sgd", MODE="fit", LOST=str(lost))
    script = alone_first(tmp_path, SCRIPT, env)
    hosts, discover = discovery(tmp_path, 3)
    job = subprocess.run([sys.executable, "-m", "tfring", "run", "--all-output", "--min-np", "2", "--max-np", "3",
                          "--host-discovery-script", str(discover), "--blacklist-cooldown-range", "0.1", "0.1",
                          sys.executable, str(script)], capture_output=True, text=True, timeout=600,
                         env={**env, "HOSTS": str(hosts)})
    assert job.returncode == 0, job.stderr[-3000:]
    assert (f"rank {lost} was killed by SIGKILL; host localhost kept out for 0.1 s; going on with the 2 ranks left, "
            "in their processes (restart 1 of at most 3)") in job.stderr, job.stderr[-3000:]
    assert "the job ended well after 1 failure and 0 resizes" in job.stderr
    assert job.stdout.count("started pid") == 3, job.stdout  # nobody started again
    assert job.stdout.count("reset: 2 rank(s) from epoch 2 batch 2 step 0") == 2, job.stdout
    one = np.load(tmp_path / "w-fit-sgd-alone-0of1.npy")
    for rank in (0, 1):
        went_on = np.load(tmp_path / f"w-fit-sgd-job-{rank}of2.npy")
        assert np.max(np.abs(went_on - one)) <= 1e-5, np.max(np.abs(went_on - one))


def test_tfring_run_grows_the_job_in_its_processes(tmp_path):
    # The hosts offer a third slot mid-training: the two ranks stop at their next commit and wait,
    # the launcher starts a third rank beside them, which joins; nobody starts again.
    env = env_of(OUT=str(tmp_path), OPT="sgd", MODE="fit", GROW="1")
    script = alone_first(tmp_path, SCRIPT, env)
    hosts, discover = discovery(tmp_path, 2)
    job = subprocess.run([sys.executable, "-m", "tfring", "run", "--all-output", "--min-np", "2", "--max-np", "3",
                          "--host-discovery-script", str(discover), sys.executable, str(script)],
                         capture_output=True, text=True, timeout=600, env={**env, "HOSTS": str(hosts)})
    assert job.returncode == 0, job.stderr[-3000:]
    assert ("the hosts now offer 3 ranks where the job runs 2: growing it in the ranks' processes, once the ranks "
            "stop at their next commit") in job.stderr, job.stderr[-3000:]
    assert "the ranks stopped at a commit and wait for the new ones in their processes" in job.stderr
    assert "the job ended well after 0 failures and 1 resize" in job.stderr, job.stderr[-3000:]
    assert job.stdout.count("started pid") == 3, job.stdout  # two at the start, one joining
    assert job.stdout.count("reset: 3 rank(s) from epoch 1 batch 2 step 0") == 3, job.stdout
    one = np.load(tmp_path / "w-fit-sgd-alone-0of1.npy")
    for rank in range(3):
        grown = np.load(tmp_path / f"w-fit-sgd-job-{rank}of3.npy")
        assert np.max(np.abs(grown - one)) <= 1e-5, np.max(np.abs(grown - one))


def test_tfring_run_starts_the_job_again_when_a_new_rank_cannot_join_in_its_process(tmp_path):
    # An unseeded script: the new rank's NumPy state is not the one the two ranks took from rank 0,
    # so it cannot join them; it says so before it waits, and the launcher starts the job again on
    # the three slots from the commit the hosts keep (a resize, not a failure).
    env = env_of(OUT=str(tmp_path), OPT="sgd", MODE="fit", GROW="1", UNSEEDED="1")
    (tmp_path / "train.py").write_text(SCRIPT)
    hosts, discover = discovery(tmp_path, 2)
    job = subprocess.run([sys.executable, "-m", "tfring", "run", "--all-output", "--min-np", "2", "--max-np", "3",
                          "--host-discovery-script", str(discover), sys.executable, str(tmp_path / "train.py")],
                         capture_output=True, text=True, timeout=600, env={**env, "HOSTS": str(hosts)})
    assert job.returncode == 0, job.stderr[-3000:]
    assert "tfring: rank 2: cannot join the running job in this process: the random state" in job.stderr, job.stderr[-3000:]
    assert ("tfring run: rank 2 on host localhost cannot join the running job in its process (its line says why); "
            "starting the job again on every slot") in job.stderr, job.stderr[-3000:]
    assert "the job ended well after 0 failures and 1 resize" in job.stderr, job.stderr[-3000:]
    assert job.stdout.count("started pid") == 6, job.stdout  # 2, the one that could not join, then 3
    assert job.stdout.count("reset: 3 rank(s) from epoch 1 batch 2 step 0") == 3, job.stdout
    weights = [np.load(tmp_path / f"w-fit-sgd-job-{rank}of3.npy") for rank in range(3)]
    assert all(np.array_equal(w, weights[0]) for w in weights)
