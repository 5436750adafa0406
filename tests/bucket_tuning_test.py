"""`RingStrategy(bucket_bytes="auto")`: fit times each candidate bucket size over its first steps,
every rank picks the same one, rank 0 prints the figures, and training equals the untuned run."""

import json

import numpy as np
import pytest


pytestmark = pytest.mark.multiprocess

FIT = r'''
import json, os
import numpy as np
import tensorflow as tf
import keras
import tfring
from tfring.strategy.gradients import bucket_tuning

tf.config.threading.set_intra_op_parallelism_threads(1)
rng = np.random.default_rng(0)
X = rng.standard_normal((480, 16)).astype("float32")
Y = (X[:, :8].sum(axis=1) > 0).astype("int32")
out = os.environ["OUT"]


def run(name, bucket_bytes, fits):
    strategy = tfring.RingStrategy(bucket_bytes=bucket_bytes)
    if bucket_bytes == "auto":  # sizes that matter for this small model: 3 candidates
        strategy.bucket_tuner = bucket_tuning.BucketTuner(strategy.extended, strategy.rank,
                                                          sizes=(4096, 16384, 1 << 20), timed_steps=3)
    keras.utils.set_random_seed(1)
    with strategy.scope():
        m = keras.Sequential([keras.Input((16,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(64, activation="relu"), keras.layers.Dense(2)])
        m.compile(optimizer=keras.optimizers.SGD(0.05),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    picked_after = []
    for rows in fits:  # batches of 16: a fit of 160 rows has 10 steps, fewer than the trial's 15
        m.fit(X[:rows], Y[:rows], batch_size=16, epochs=1, shuffle=False, verbose=0)
        tuner = strategy.bucket_tuner
        picked_after.append(None if tuner is None else tuner.picked)
    np.save(f"{out}/{name}-{strategy.rank}.npy", np.concatenate([v.numpy().ravel() for v in m.weights]))
    with open(f"{out}/{name}-{strategy.rank}.json", "w") as f:
        json.dump({"picked_after": picked_after, "in_use": strategy.bucket_bytes}, f)


run("auto", "auto", [160, 480])
run("fixed", 4096, [160, 480])
'''


@pytest.fixture(scope="module")
def job(warm, tmp_path_factory):
    out = tmp_path_factory.mktemp("tuning")
    proc = warm.run_job(2, FIT, env={"OUT": str(out)}, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc


def _load(out, name, rank):
    with open(out / f"{name}-{rank}.json") as f:
        return json.load(f), np.load(out / f"{name}-{rank}.npy")


def test_every_rank_picks_the_same_size_once_the_trial_ends_in_a_later_fit(job):
    out, _ = job
    (zero, _), (one, _) = _load(out, "auto", 0), _load(out, "auto", 1)
    assert zero == one
    first, second = zero["picked_after"]
    assert first is None  # 10 steps: the trial of 3 sizes x (2 + 3) steps goes on in the next fit
    assert second in (4096, 16384, 1 << 20) and zero["in_use"] == second


def test_rank0_prints_each_sizes_figure_and_the_pick(job):
    out, proc = job
    (state, _) = _load(out, "auto", 0)
    lines = [line for line in proc.stderr.splitlines() if "bucket_bytes=auto picked" in line]
    assert len(lines) == 1 and lines[0].startswith("[0] tfring: bucket_bytes=auto picked "), proc.stderr[-2000:]
    picked = {4096: "4 KiB", 16384: "16 KiB", 1 << 20: "1 MiB"}[state["picked_after"][1]]
    assert f"picked {picked} (ms per step, slowest rank: 4 KiB " in lines[0]
    assert ", 16 KiB " in lines[0] and ", 1 MiB " in lines[0]


def test_tuning_changes_no_result(job):
    out, _ = job
    tuned = [_load(out, "auto", r)[1] for r in (0, 1)]
    fixed = [_load(out, "fixed", r)[1] for r in (0, 1)]
    assert np.isfinite(tuned[0]).all()
    np.testing.assert_array_equal(tuned[0], tuned[1])
    np.testing.assert_array_equal(tuned[0], fixed[0])
