"""Every input structure one process's `fit` / `evaluate` / `predict` accepts, split the same way.

Keras' data adapters take NumPy arrays and datasets whose elements are lists, tuples, dicts or
nests of them, with and without targets and sample weights; the job must read each as one process
does (a list of inputs fed with no targets is the inputs, not (x, y)). Each case trains a
two-input model on 2 and 3 ranks and compares the weights, `evaluate` and `predict` with one process.
"""

import json

import numpy as np
import pytest

from tfring_dev.testing import assert_ranks_equal_one_process

pytestmark = pytest.mark.multiprocess

SCRIPT = r'''
import json, os
import numpy as np
import tensorflow as tf
import keras
from keras import layers, ops
import tfring

tf.config.threading.set_intra_op_parallelism_threads(1)
strategy = tfring.RingStrategy()
out = os.environ["OUT"]
rng = np.random.default_rng(0)
ROWS = 100  # batches of 48: a last batch of 4, uneven over 3 ranks
A = rng.standard_normal((ROWS, 4)).astype("float32")
B = rng.standard_normal((ROWS, 3)).astype("float32")
Y = (A[:, :1] - B[:, 1:2]).astype("float32")
W = rng.uniform(0.2, 2.0, ROWS).astype("float32")


class Endpoint(layers.Layer):
    def call(self, targets, outputs):
        self.add_loss(ops.mean(ops.square(targets - outputs)))
        return outputs


def two_inputs(with_targets):
    a, b = keras.Input((4,), name="a"), keras.Input((3,), name="b")
    out = layers.Dense(1)(layers.Dense(6, activation="tanh")(layers.Concatenate()([a, b])))
    if with_targets:
        return keras.Model([a, b], out)
    t = keras.Input((1,), name="t")
    return keras.Model([a, b, t], Endpoint()(t, out))


def dataset(*element):
    return tf.data.Dataset.from_tensor_slices(element[0] if len(element) == 1 else element).batch(48)


CASES = {  # name: (model with targets inside?, fit's arguments, evaluate's, predict's)
    "numpy_list": (True, dict(x=[A, B], y=Y), dict(x=[A, B], y=Y), [A, B]),
    "numpy_tuple": (True, dict(x=(A, B), y=Y), dict(x=(A, B), y=Y), (A, B)),
    "numpy_dict": (True, dict(x={"a": A, "b": B}, y=Y), dict(x={"a": A, "b": B}, y=Y), {"a": A, "b": B}),
    "numpy_dict_weights": (True, dict(x={"a": A, "b": B}, y=Y, sample_weight=W),
                           dict(x={"a": A, "b": B}, y=Y, sample_weight=W), {"a": A, "b": B}),
    "numpy_list_no_targets": (False, dict(x=[A, B, Y]), dict(x=[A, B, Y]), {"a": A, "b": B, "t": Y}),
    "dataset_tuple": (True, dict(x=dataset((A, B), Y)), dict(x=dataset((A, B), Y)), dataset(((A, B),))),
    "dataset_dict_weights": (True, dict(x=dataset({"a": A, "b": B}, Y, W)), dict(x=dataset({"a": A, "b": B}, Y, W)),
                             dataset({"a": A, "b": B})),
    "dataset_list_no_targets": (False, dict(x=dataset(((A, B, Y),))), dict(x=dataset(((A, B, Y),))),
                                dataset(((A, B, Y),))),
}

for name in os.environ["CASES"].split(","):
    with_targets, fit_args, evaluate_args, predict_x = CASES[name]
    keras.utils.set_random_seed(1)
    with strategy.scope():
        model = two_inputs(with_targets)
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse" if with_targets else None)
    numpy = not isinstance(fit_args["x"], tf.data.Dataset)
    batching = dict(batch_size=48) if numpy else {}
    model.fit(**fit_args, **batching, epochs=2, verbose=0, **(dict(shuffle=False) if numpy else {}))
    evaluated = model.evaluate(**evaluate_args, **batching, verbose=0, return_dict=True)
    predicted = model.predict(predict_x, **batching, verbose=0)
    stem = f"{out}/{name}-{strategy.rank}of{strategy.size}"
    np.save(f"{stem}.npy", np.concatenate([v.numpy().ravel() for v in model.weights]))
    np.save(f"{stem}-predict.npy", predicted)
    with open(f"{stem}.json", "w") as f:
        json.dump(evaluated, f)
'''

CASES = ["numpy_list", "numpy_tuple", "numpy_dict", "numpy_dict_weights", "numpy_list_no_targets",
         "dataset_tuple", "dataset_dict_weights", "dataset_list_no_targets"]


@pytest.fixture(scope="module")
def results(warm, tmp_path_factory):
    out = tmp_path_factory.mktemp("input_structures")
    env = {"OUT": str(out), "PYTHONWARNINGS": "ignore", "CASES": ",".join(CASES)}
    warm.run_alone_then_jobs(SCRIPT, env=env, sizes=(2, 3), timeout=900)
    return out


@pytest.mark.parametrize("size", [2, 3])
@pytest.mark.parametrize("case", CASES)
def test_fit_evaluate_predict_equal_one_process(results, case, size):
    assert_ranks_equal_one_process(results, case, size)
    one = json.loads((results / f"{case}-0of1.json").read_text())
    predicted = np.load(results / f"{case}-0of1-predict.npy")
    for rank in range(size):
        evaluated = json.loads((results / f"{case}-{rank}of{size}.json").read_text())
        assert sorted(evaluated) == sorted(one)
        for key, value in one.items():
            np.testing.assert_allclose(evaluated[key], value, rtol=1e-5, atol=1e-6, err_msg=key)
        np.testing.assert_allclose(np.load(results / f"{case}-{rank}of{size}-predict.npy"), predicted, atol=1e-5)
