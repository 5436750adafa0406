"""Randomness at the user's edge: data made with NumPy's and Python's global generators, per-rank
NumPy inputs, and per-row noise (Dropout), on 2 and 3 ranks.

- Data made *after* `RingStrategy()` with unseeded `np.random` and `random` is the same on every
  rank, and the job's weights equal one process trained on rank 0's arrays.
- Data made *before* it differs per rank: `fit`, `evaluate` and `predict` fail on every rank,
  naming the input.
- Dropout masks differ between ranks within a step (each rank draws its own noise), while the
  initial weights and the generators' state stay identical and training keeps the ranks equal.
"""

import json

import numpy as np
import pytest

from tfring_dev.testing import rank_lines
from tfring_dev.testing import run_alone
from tfring_dev.testing import run_job

pytestmark = pytest.mark.multiprocess

AFTER = r'''
import os, random
import numpy as np
import tensorflow as tf
import keras
import tfring

tf.config.threading.set_intra_op_parallelism_threads(1)
out, alone = os.environ["OUT"], "DATA_FROM" in os.environ
strategy = tfring.RingStrategy()
if alone:
    data = np.load(os.environ["DATA_FROM"])
    x, y = data["x"], data["y"]
else:
    # What outside scripts do: unseeded global generators, after the strategy exists.
    x = np.random.rand(90, 6).astype("float32")
    order = np.random.permutation(len(x))
    labels = np.array([random.randint(0, 2) for _ in range(len(x))])
    x, y = x[order], labels[order]
    np.savez(f"{out}/data-{strategy.rank}of{strategy.size}.npz", x=x, y=y)
keras.utils.set_random_seed(1)
with strategy.scope():
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(3)])
    model.compile(optimizer=keras.optimizers.SGD(0.1),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(x, y, batch_size=30, epochs=2, shuffle=True, verbose=0)
w = np.concatenate([v.numpy().ravel() for v in model.weights])
np.save(f"{out}/w-{os.environ.get('AS', strategy.rank)}of{os.environ.get('OF', strategy.size)}.npy", w)
'''


@pytest.mark.parametrize("size", [2, pytest.param(3, marks=pytest.mark.extended)])
def test_data_made_after_the_strategy_is_the_same_and_trains_as_one_process(tmp_path, size):
    job = run_job(size, AFTER, env={"OUT": str(tmp_path)})
    assert job.returncode == 0, job.stderr[-3000:]
    data = [np.load(tmp_path / f"data-{r}of{size}.npz") for r in range(size)]
    for r in range(1, size):
        np.testing.assert_array_equal(data[r]["x"], data[0]["x"], err_msg=f"rank {r}'s x differs from rank 0's")
        np.testing.assert_array_equal(data[r]["y"], data[0]["y"], err_msg=f"rank {r}'s y differs from rank 0's")
    alone = run_alone(AFTER, env={"OUT": str(tmp_path), "DATA_FROM": str(tmp_path / f"data-0of{size}.npz"),
                                  "AS": "alone", "OF": str(size)})
    assert alone.returncode == 0, alone.stderr[-3000:]
    one = np.load(tmp_path / f"w-aloneof{size}.npy")
    ranks = [np.load(tmp_path / f"w-{r}of{size}.npy") for r in range(size)]
    for w in ranks[1:]:
        assert np.array_equal(w, ranks[0]), "ranks' weights differ"
    assert np.max(np.abs(ranks[0] - one)) <= 1e-5, np.max(np.abs(ranks[0] - one))


BEFORE = r'''
import os, random
import numpy as np
import tensorflow as tf
import keras
import tfring

tf.config.threading.set_intra_op_parallelism_threads(1)
noise = np.random.rand(40, 4).astype("float32")  # before the strategy: differs per rank
same = np.arange(160, dtype="float32").reshape(40, 4) / 160
labels = np.random.randint(0, 2, size=40)
strategy = tfring.RingStrategy()
keras.utils.set_random_seed(1)
with strategy.scope():
    inp = {"a": keras.Input((4,), name="a"), "b": keras.Input((4,), name="b")}
    model = keras.Model(inp, keras.layers.Dense(2)(keras.layers.Concatenate()([inp["a"], inp["b"]])))
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
fixed = np.arange(40) % 2
cases = {
    "fit_x": lambda: model.fit({"a": same, "b": noise}, fixed, batch_size=12, verbose=0),
    "fit_y": lambda: model.fit({"a": same, "b": same}, labels, batch_size=12, verbose=0),
    "fit_validation": lambda: model.fit({"a": same, "b": same}, fixed, batch_size=12, verbose=0,
                                        validation_data=({"a": same, "b": same}, labels)),
    "evaluate": lambda: model.evaluate({"a": noise, "b": same}, fixed, batch_size=12, verbose=0),
    "predict": lambda: model.predict({"a": same, "b": noise}, batch_size=12, verbose=0),
    "same": lambda: model.fit({"a": same, "b": same}, fixed, batch_size=12, verbose=0),
}
for name, case in cases.items():
    try:
        case()
        print(f"CASE {name}: ran")
    except ValueError as e:
        print(f"CASE {name}: {e}")
'''


@pytest.mark.parametrize("size", [2, pytest.param(3, marks=pytest.mark.extended)])
def test_data_made_before_the_strategy_fails_on_every_rank_naming_the_input(tmp_path, size):
    job = run_job(size, BEFORE, env={"OUT": str(tmp_path)})
    assert job.returncode == 0, job.stderr[-3000:]
    differing = ", ".join(str(r) for r in range(1, size))
    expected = {"fit_x": "`x['b']` of fit()", "fit_y": "`y` of fit()", "fit_validation": "`validation_data[1]` of fit()",
                "evaluate": "`x['a']` of evaluate()", "predict": "`x['b']` of predict()"}
    for r in range(size):
        lines = {line.split(":", 1)[0][len("CASE "):]: line.split(":", 1)[1]
                 for line in rank_lines(job.stdout, r) if line.startswith("CASE ")}
        assert lines["same"].strip() == "ran", (r, lines)
        for name, needle in expected.items():
            message = lines[name]
            assert needle in message and "differs between ranks" in message, (r, name, message)
            assert f"(rank {differing} against rank 0" in message, (r, name, message)
            assert "unseeded randomness" in message and "before tfring.RingStrategy()" in message, message


NOISE = r'''
import json, os
import numpy as np
import tensorflow as tf
import keras
import tfring

tf.config.threading.set_intra_op_parallelism_threads(1)
strategy = tfring.RingStrategy()
with strategy.scope():
    dropout = keras.layers.Dropout(0.5)
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(16), keras.layers.Dropout(0.5),
                              keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
first = [v.numpy().tolist() for v in model.weights]
step = tf.function(lambda: dropout(tf.ones([2, 256]), training=True))
masks = [[m.numpy().tolist() for m in strategy.experimental_local_results(strategy.run(step))] for _ in range(2)]
gathered_first = [tfring.allgather_object(w) for w in first]
state = tfring.allgather_object(dropout.seed_generator.state.numpy().tolist())
x = np.linspace(-1, 1, 64 * 32, dtype="float32").reshape(32, 64)
model.fit(x, x[:, :1], batch_size=12, epochs=1, shuffle=False, verbose=0)
trained = tfring.allgather_object(np.concatenate([v.numpy().ravel() for v in model.weights]).tolist())
if strategy.rank == 0:  # a file, not a line: the weights make ~100 KB of JSON
    with open(os.environ["OUT"] + "/result.json", "w") as f:
        json.dump({"masks": masks, "first": gathered_first, "state": state, "trained": trained}, f)
'''


@pytest.mark.parametrize("size", [2, pytest.param(3, marks=pytest.mark.extended)])
def test_dropout_masks_differ_across_ranks_while_weights_stay_identical(tmp_path, size):
    job = run_job(size, NOISE, env={"OUT": str(tmp_path)})
    assert job.returncode == 0, job.stderr[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    for step in result["masks"]:
        assert len(step) == size  # every rank's output of the step, in rank order
        kept = [np.asarray(m) != 0 for m in step]
        for a in range(size):
            assert 0.3 < kept[a].mean() < 0.7, kept[a].mean()
            assert not np.array_equal(kept[a][0], kept[a][1]), "rows of one rank drew one mask"
            for b in range(a + 1, size):
                agree = (kept[a] == kept[b]).mean()
                assert agree < 0.7, f"ranks {a} and {b} drew the same mask ({agree:.0%} of elements agree)"
    assert not np.array_equal(result["masks"][0][0], result["masks"][1][0]), "the stream did not advance"
    for per_rank in result["first"]:
        assert all(w == per_rank[0] for w in per_rank), "initial weights differ between ranks"
    assert all(s == result["state"][0] for s in result["state"]), "the seed generators' state differs"
    assert all(w == result["trained"][0] for w in result["trained"]), "ranks' weights differ after fit"
