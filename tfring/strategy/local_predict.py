"""`predict_on_batch` under RingStrategy: this rank's rows in, this rank's predictions out.

Keras runs `predict_on_batch(x)` through the strategy's step, which under RingStrategy gathers every
rank's outputs: with the same 8 rows on 2 ranks it would return 16. A batch handed to
`predict_on_batch` is not a share of a global batch (no dataset was distributed), and predicting
needs nothing from the other ranks, so tfring runs it on this rank alone: it returns exactly the
predictions for `x`, as one process does, and it may be called on some ranks only.

`train_on_batch` and `test_on_batch` stay collective: every rank calls them, each with its own
batch (the same batch on every rank gives one process's result), and the gradients and metrics
cover the rows of all ranks.
"""

import functools

_MARK = "_tfring_local_predict"


def _multi_rank(model):
    strategy = getattr(model, "_distribute_strategy", None)
    return getattr(strategy, "size", 1) > 1 and hasattr(strategy, "rank")


def _local_predict_function(model):
    import tensorflow as tf

    fn = getattr(model, _MARK, None)
    if fn is None:
        fn = model.predict_step
        if not model.run_eagerly:
            fn = tf.function(fn, reduce_retracing=True)
        object.__setattr__(model, _MARK, fn)  # not a tracked attribute of the model
    return fn


def _predict_on_batch(original):
    @functools.wraps(original)
    def predict_on_batch(self, x):
        if not _multi_rank(self):
            return original(self, x)
        from keras.src import tree
        from keras.src.backend.tensorflow.trainer import convert_to_np_if_not_ragged

        outputs = _local_predict_function(self)((x,))
        return tree.map_structure(convert_to_np_if_not_ragged, outputs)

    setattr(predict_on_batch, _MARK, True)
    return predict_on_batch


def install():
    """Wraps `keras.Model.predict_on_batch` (see the module docstring). Idempotent.

    Example:

    >>> install()
    """
    import keras

    current = keras.Model.predict_on_batch
    if not getattr(current, _MARK, False):
        keras.Model.predict_on_batch = _predict_on_batch(current)
