"""Refuses to train, in a multi-rank job, a model that was built outside `RingStrategy.scope()`.

Keras binds a model to the strategy in scope when the model is created. A model created outside
the scope belongs to no strategy: `fit` would train each rank on its own data with its own
initial weights and never average gradients, so the replicas would silently diverge (what Horovod
does with Keras 3). `install()` wraps `keras.Model.fit` to turn that into an error (and to explain
a fit that failed because another rank was saving a model while this one trained: see
`checkpointing`).
"""

import functools

from tfring import runtime
from tfring.strategy import checkpointing
from tfring.strategy import keras_patches


def _check(model):
    if not runtime.is_initialized() or runtime.size() < 2:
        return
    if getattr(model, "_distribute_strategy", "absent") is not None:
        return  # bound to a strategy (ours or one the user chose), or not a TF-backend model
    raise ValueError(
        f"tfring: model {model.name!r} was built outside `strategy.scope()`, so in this job of "
        f"{runtime.size()} ranks it would train on each rank alone (gradients not averaged, weights "
        f"diverging). Create and compile the model inside `with strategy.scope():`, where "
        f"`strategy = tfring.RingStrategy()`.")


def _checked_fit(original):
    @functools.wraps(original)
    def fit(self, *args, **kwargs):
        _check(self)
        with checkpointing.save_mismatch_explained():
            return original(self, *args, **kwargs)

    return fit


PATCHES = [keras_patches.Patch("keras.Model", "fit", _checked_fit,
                               "refuses a model built outside strategy.scope()")]


def install():
    """Wraps `keras.Model.fit` with the check. Idempotent; called by `RingStrategy()`.

    Example:

    >>> install()
    """
    keras_patches.apply(PATCHES)
