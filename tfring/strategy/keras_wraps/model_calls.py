"""One wrap of each of `keras.Model.fit`, `evaluate` and `predict`: what RingStrategy does before
Keras runs them, in this order.

For a model of a RingStrategy with more than one rank:

1. `fit`: while `bucket_bytes="auto"` is still trying sizes, the strategy's tuner joins the
   callbacks (`gradients.bucket_tuning`; found as the strategy's `bucket_tuner`);
2. `fit`: every rank trains the same model with the same compile settings (`model_fingerprint`);
3. the NumPy inputs are the same arrays on every rank (`input.digest`);
4. ranks other than 0 report nothing: `verbose=0`, and no TensorBoard, CSVLogger, ... (`reporting`).

Then, in a job of several ranks, `fit` refuses a model built outside `strategy.scope()`
(`scope_check`), and a `fit` that fails because another rank was saving a model meanwhile says so
(`checkpointing`). Steps 2 and 3 are collectives: every rank runs them, in this order.
"""

import functools
import inspect

import keras

from tfring.strategy import keras_patches
from tfring.strategy import model_fingerprint
from tfring.strategy.input import digest
from tfring.strategy.keras_wraps import checkpointing
from tfring.strategy.keras_wraps import reporting
from tfring.strategy.keras_wraps import scope_check
from tfring.strategy.strategy_base import ring_strategy_of


def _tuner_joins(model, strategy, name, arguments):
    tuner = getattr(strategy, "bucket_tuner", None)
    if tuner is not None and tuner.picked is None:
        arguments["callbacks"] = _with(arguments.get("callbacks"), tuner)


def _with(callbacks, callback):
    if isinstance(callbacks, keras.callbacks.CallbackList):
        callbacks.append(callback)
        return callbacks
    return list(callbacks or []) + [callback]


def _same_model(model, strategy, name, arguments):
    model_fingerprint.check_same_model_on_every_rank(model)


def _same_inputs(model, strategy, name, arguments):
    digest.check_same_on_every_rank(name, {k: arguments.get(k) for k in digest.INPUTS[name]})


def _quiet(model, strategy, name, arguments):
    reporting.quiet(strategy, arguments)


STEPS = {"fit": (_tuner_joins, _same_model, _same_inputs, _quiet),
         "evaluate": (_same_inputs, _quiet),
         "predict": (_same_inputs, _quiet)}


def _wrapped(original):
    name = original.__name__
    signature = inspect.signature(original)

    @functools.wraps(original)
    def call(self, *args, **kwargs):
        strategy = ring_strategy_of(self)
        if strategy is not None:
            bound = signature.bind(self, *args, **kwargs)
            for step in STEPS[name]:
                step(self, strategy, name, bound.arguments)
            args, kwargs = bound.args[1:], bound.kwargs
        if name != "fit":
            return original(self, *args, **kwargs)
        scope_check.check(self)
        with checkpointing.save_mismatch_explained():
            return original(self, *args, **kwargs)

    return call


# The steps read and set arguments by name (one that Keras no longer takes would be dropped or left
# unchecked, silently): Keras' parameters up to the last of them.
_PARAMETERS = {"fit": ("self", "x", "y", "batch_size", "epochs", "verbose", "callbacks", "validation_split",
                       "validation_data", "shuffle", "class_weight", "sample_weight"),
               "evaluate": ("self", "x", "y", "batch_size", "verbose", "sample_weight", "steps", "callbacks"),
               "predict": ("self", "x", "batch_size", "verbose", "steps", "callbacks")}

PATCHES = [keras_patches.Patch("keras.Model", name, _wrapped, "RingStrategy's checks and quiet ranks > 0, in order",
                               parameters=parameters)
           for name, parameters in _PARAMETERS.items()]
