"""Keras' `*_on_batch` calls under RingStrategy.

- `predict_on_batch(x)` runs on this rank alone: Keras would run it through the strategy's step,
  which gathers every rank's outputs (the same 8 rows on 2 ranks would come back as 16). A batch
  handed to `predict_on_batch` is not a share of a global batch, and predicting needs nothing from
  the other ranks, so it returns exactly the predictions for `x`, as one process does, and may be
  called on some ranks only. The model must be built (it creates no variables there).
- `train_on_batch` and `test_on_batch` stay collective: every rank calls them, each with its own
  batch (the same batch on every rank gives one process's result), and the gradients cover the
  rows of all ranks. The logs they return are read from the metrics after the step, so they are
  global (weighted by rows), like `fit`'s, also when the ranks' batches differ in size.
"""

import functools
import inspect

from tfring.strategy import keras_patches
from tfring.strategy.strategy_base import ring_strategy_of

_CACHE = "_tfring_local_predict"


def _local_predict_function(model):
    import tensorflow as tf

    cached = getattr(model, _CACHE, None)
    if cached is None or cached[0] != model.run_eagerly:
        fn = model.predict_step if model.run_eagerly else tf.function(model.predict_step, reduce_retracing=True)
        cached = (model.run_eagerly, fn)
        object.__setattr__(model, _CACHE, cached)  # not a tracked attribute of the model
    return cached[1]


def _predict_on_batch(original):
    @functools.wraps(original)
    def predict_on_batch(self, x):
        if ring_strategy_of(self) is None:
            return original(self, x)
        if not self.built:
            raise ValueError(f"tfring: predict_on_batch on model {self.name!r}, which is not built yet. Under "
                             f"RingStrategy it runs on this rank alone and cannot create variables: build the "
                             f"model first (fit, evaluate or predict on every rank, or call it on a batch).")
        import keras
        from keras.src.backend.tensorflow.trainer import convert_to_np_if_not_ragged

        outputs = _local_predict_function(self)((x,))
        return keras.tree.map_structure(convert_to_np_if_not_ragged, outputs)

    return predict_on_batch


def _global_logs(original):
    signature = inspect.signature(original)

    @functools.wraps(original)
    def on_batch(self, *args, **kwargs):
        if ring_strategy_of(self) is None:
            return original(self, *args, **kwargs)
        bound = signature.bind(self, *args, **kwargs)
        return_dict = bound.arguments.get("return_dict", False)
        bound.arguments["return_dict"] = True
        logs = original(*bound.args, **bound.kwargs)
        from keras.src.utils.python_utils import pythonify_logs

        logs = pythonify_logs(self._get_metrics_result_or_logs(logs))  # read after the step: global
        return logs if return_dict else self._flatten_metrics_in_order(logs)

    return on_batch


# `_global_logs` binds the call to Keras' signature and sets `return_dict` by name: the parameters
# are declared up to it, so that a Keras without it fails here instead of ignoring the setting.
PATCHES = [
    keras_patches.Patch("keras.Model", "predict_on_batch", _predict_on_batch, "predicts on this rank alone",
                        parameters=("self", "x")),
    keras_patches.Patch("keras.Model", "train_on_batch", _global_logs, "returns the job's logs",
                        parameters=("self", "x", "y", "sample_weight", "class_weight", "return_dict")),
    keras_patches.Patch("keras.Model", "test_on_batch", _global_logs, "returns the job's logs",
                        parameters=("self", "x", "y", "sample_weight", "return_dict")),
]

KERAS_INTERNALS = [
    keras_patches.Internal("keras.Model", "_get_metrics_result_or_logs", ("self", "logs"),
                           "the logs read from the metrics after the step: global"),
    keras_patches.Internal("keras.Model", "_flatten_metrics_in_order", ("self", "logs"),
                           "train_on_batch's logs as a list, in Keras' order"),
    keras_patches.Internal("keras.src.utils.python_utils", "pythonify_logs", ("logs",),
                           "the logs as Python numbers, as Keras returns them"),
    keras_patches.Internal("keras.src.backend.tensorflow.trainer", "convert_to_np_if_not_ragged", ("x",),
                           "predict_on_batch's outputs as Keras returns them"),
]
