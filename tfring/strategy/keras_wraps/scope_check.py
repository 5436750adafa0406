"""Refuses to train, in a multi-rank job, a model that was built outside `RingStrategy.scope()`.

Keras binds a model to the strategy in scope when the model is created. A model created outside
the scope belongs to no strategy: `fit` would train each rank on its own data with its own
initial weights and never average gradients, so the replicas would silently diverge (what Horovod
does with Keras 3). `keras_wraps.model_calls` calls `check` before `fit` to turn that into an error.
"""

from tfring import runtime


def check(model):
    """Refuses `model` when this is a job of several ranks and the model belongs to no strategy.

    Args:
        model: the Keras model about to be trained.

    Raises:
        ValueError: the model was built outside `strategy.scope()`.

    Example:

    >>> check(model)   # in model_calls' wrap of fit
    """
    if not runtime.is_initialized() or runtime.size() < 2:
        return
    if getattr(model, "_distribute_strategy", "absent") is not None:
        return  # bound to a strategy (ours or one the user chose), or not a TF-backend model
    raise ValueError(
        f"tfring: model {model.name!r} was built outside `strategy.scope()`, so in this job of "
        f"{runtime.size()} ranks it would train on each rank alone (gradients not averaged, weights "
        f"diverging). Create and compile the model inside `with strategy.scope():`, where "
        f"`strategy = tfring.RingStrategy()`.")
