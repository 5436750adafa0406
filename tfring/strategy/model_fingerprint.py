"""Every rank must train the same model: `fit` compares the model and its compile settings first
(`keras_wraps.model_calls` calls `check_same_model_on_every_rank`).

Ranks that build models of the same shapes but not the same model (rank 1 with `tanh` where rank
0 has `relu`, a loss `from_logits=False` against `True`, another `steps_per_execution`) train
without any error: the gradients of two different models are averaged, the weights stay
identical, and the job exits 0. So at the start of `fit` every rank digests each top-level layer
(its class and config), and each compile setting (loss, metrics, optimizer class and config,
`steps_per_execution`, `jit_compile`, ...: Keras' `get_compile_config()`), and the ranks compare
them (`rank_agreement`). When they differ every rank fails, naming the layers or settings that
differ.

A top-level layer's name is left out (Keras numbers names by how many layers were made before,
which may differ where one rank built something more). The optimizer's variables are created in
the strategy's scope and take rank 0's values, a learning rate included: a learning rate given
differently per rank is trained with rank 0's, and cannot be told apart here.
A layer whose config cannot be read (a custom layer without `get_config`) is compared by its
class and its weights' shapes.
"""

from tfring.strategy import rank_agreement


def _layer_config(layer):
    try:
        config = dict(layer.get_config())
    except Exception:  # noqa: BLE001 (a custom layer without get_config: compare what can be seen)
        config = {"weights": [list(w.shape) for w in layer.weights]}
    config.pop("name", None)  # numbered by how many layers were made before
    return {"class": f"{type(layer).__module__}.{type(layer).__qualname__}", "config": config}


def _compile_config(model):
    try:
        return model.get_compile_config() or {}
    except Exception:  # noqa: BLE001 (something Keras cannot serialise: compare the classes)
        return {"optimizer": type(model.optimizer).__qualname__, "loss": repr(type(model.loss))}


def fingerprint(model):
    """The model's layers and compile settings as (label, digest) pairs, in a fixed order.

    Args:
        model: a Keras model.

    Returns:
        A list of `(label, int)`.

    Example:

    >>> [label for label, _ in fingerprint(model)][:2]
    ['layer 0 (Dense)', 'layer 1 (Dropout)']
    """
    items = [(f"layer {i} ({type(layer).__name__})", _layer_config(layer)) for i, layer in enumerate(model.layers)]
    if model.compiled:
        settings = _compile_config(model)
        items += [(f"compile setting `{key}`", settings[key]) for key in sorted(settings)]
    return [(label, rank_agreement.digest(value)) for label, value in items]


def check_same_model_on_every_rank(model):
    """Fails on every rank when the ranks' models or compile settings differ. Every rank must call it.

    Args:
        model: the Keras model about to be trained.

    Raises:
        ValueError: naming the layers or settings that differ, and the ranks.

    Example:

    >>> check_same_model_on_every_rank(model)
    """
    items = fingerprint(model)
    found = rank_agreement.differences([label for label, _ in items], [d for _, d in items])
    if found is None:
        return
    ranks, names = found
    what = "the number of layers and compile settings" if names is None else ", ".join(names)
    raise ValueError(
        f"tfring: the model trained by fit() differs between ranks: {what} (rank {', '.join(map(str, ranks))} "
        f"against rank 0; compared by each layer's class and config and Keras' get_compile_config()). Every "
        f"rank must build and compile the same model: one that differs (an activation, a loss's from_logits, "
        f"steps_per_execution) would train on averaged gradients of different models, silently. Look for code "
        f"that depends on the rank or on a per-rank file or setting.")
