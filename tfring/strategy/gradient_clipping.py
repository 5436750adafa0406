"""Keras' gradient clipping under RingStrategy: the job's gradients are clipped, as in one process.

Keras 3's optimizer clips (`clipnorm`, `global_clipnorm`, `clipvalue`) before its TensorFlow
backend all-reduces the gradients, so each rank would clip its own share and the clipped shares
would be summed: not what one process computes from the global batch (two shares clipped to a
norm of c can add up to 2c). With clipping on, RingStrategy all-reduces where Keras clips, clips
the sum, and lets the update that follows use it as it is:

- the wrap of `_backend_apply_gradients` opens a pending record for the step (`_Reduced`);
- the wrap of `_clip_gradients` all-reduces the gradients (in buckets, straight from the backward
  pass, so `global_clipnorm` no longer makes every bucket wait for every gradient; sparse ones as
  rows, never densified: `sparse_gradients`), clips them and notes the clipped tensors in the
  record;
- the wrap of `_all_reduce_sum_gradients` passes exactly those tensors through, and fails loudly
  if it is handed anything else after clipping (a second reduction would multiply the gradients
  by the number of ranks).

With gradient accumulation Keras clips in the step that applies, so the accumulated sum is
still reduced once, there.
"""

import tensorflow as tf

from tfring.strategy import keras_patches
from tfring.strategy import ring_model
from tfring.strategy import step_rows

_RECORD = "_tfring_reduced_gradients"


class _Reduced:
    """The clipped gradients of the `_backend_apply_gradients` call being traced, once reduced."""

    def __init__(self, variables):
        self.variables = variables  # the gradients' variables, in order
        self.ids = None


def clips(optimizer):
    """True when `optimizer` clips gradients (`clipnorm`, `global_clipnorm` or `clipvalue`).

    Args:
        optimizer: a Keras optimizer.

    Returns:
        bool.

    Example:

    >>> clips(keras.optimizers.SGD(0.1, clipnorm=1.0))
    True
    """
    return any((getattr(optimizer, name, None) or 0) > 0 for name in ("clipnorm", "global_clipnorm", "clipvalue"))


def _open_record(original):
    def wrapper(self, grads, trainable_variables):
        if step_rows.current() is None or not clips(self):
            return original(self, grads, trainable_variables)
        outer = getattr(self, _RECORD, None)
        setattr(self, _RECORD, _Reduced(list(trainable_variables)))
        try:
            return original(self, grads, trainable_variables)
        finally:
            setattr(self, _RECORD, outer)

    return wrapper


def _reduce_then_clip(original):
    def wrapper(self, grads):
        record = getattr(self, _RECORD, None)
        if record is None:
            return original(self, grads)
        with ring_model.tracing_flag(tf.distribute.get_strategy().extended, "clipping_next"):
            pairs = self._all_reduce_sum_gradients(list(zip(grads, record.variables)))  # ids None: reduces
        clipped = original(self, [g for g, _ in pairs])
        record.ids = [id(g) for g in clipped if g is not None]
        return clipped

    return wrapper


def _pass_reduced(original):
    def wrapper(self, grads_and_vars):
        record = getattr(self, _RECORD, None)
        if record is None or record.ids is None:
            return original(self, grads_and_vars)
        grads_and_vars = list(grads_and_vars)
        ids = [id(g) for g, _ in grads_and_vars if g is not None]
        if record.ids != ids:
            raise RuntimeError(
                "tfring: the gradients Keras' optimizer is about to all-reduce are not the ones "
                "RingStrategy reduced and clipped in this step (something changed them between "
                f"clipping and the update: {type(self).__name__}); reducing them again would be wrong")
        record.ids = None  # one update per clipping
        return grads_and_vars

    return wrapper


PATCHES = [
    keras_patches.Patch("keras.src.optimizers.base_optimizer.BaseOptimizer", "_backend_apply_gradients",
                        _open_record, "under RingStrategy, clipping acts on the job's gradients"),
    keras_patches.Patch("keras.src.optimizers.base_optimizer.BaseOptimizer", "_clip_gradients",
                        _reduce_then_clip, "under RingStrategy, gradients are all-reduced before they are clipped"),
    keras_patches.Patch("keras.src.backend.tensorflow.optimizer.TFOptimizer", "_all_reduce_sum_gradients",
                        _pass_reduced, "gradients reduced before clipping are not reduced again"),
]


def install():
    """Wraps Keras' gradient clipping as the module docstring says. Idempotent.

    Example:

    >>> install()
    """
    keras_patches.apply(PATCHES)
