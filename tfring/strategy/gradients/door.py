"""Gradients all-reduced before Keras' optimizer looks at them as a whole, as one process would.

Keras 3's TensorFlow optimizer all-reduces the gradients at the last moment, in the update. Two
things look at the gradient list before that, and under RingStrategy they would see each rank's
share instead of the job's gradients:

- clipping (`clipnorm`, `global_clipnorm`, `clipvalue`): each rank would clip its share and the
  clipped shares would be summed, which is not what one process computes (two shares clipped to a
  norm of c can add up to 2c);
- `LossScaleOptimizer`'s finiteness check, which puts the whole update in a `cond` on every
  gradient: no bucket could travel before the backward pass ends.

So, in a RingStrategy step with more than one rank, the gradients are all-reduced first (in
buckets, straight from the backward pass; sparse ones as rows, never densified, when they will be
clipped: one process clips the rows its batch looked up) and Keras' own reduction in the update
passes them through. An open `_Reduced` record on the optimizer says which:

- the wrap of `_backend_apply_gradients` opens one when the optimizer clips; the wrap of
  `_clip_gradients` reduces, clips and notes the clipped tensors; the wrap of
  `_all_reduce_sum_gradients` passes exactly those through, and fails loudly if handed anything
  else (a second reduction would multiply the gradients by the number of ranks);
- the wrap of `LossScaleOptimizer.apply` reduces the scaled gradients and opens a record saying
  everything its inner optimizer reduces in this call is reduced already. The record reaches that
  one optimizer only, so over a `MultiOptimizer` or another `LossScaleOptimizer` (and over an
  accumulating optimizer, which reduces once per k micro-steps) Keras' order is kept.

With gradient accumulation Keras clips in the step that applies, so the accumulated sum is still
reduced once, there.
"""

import contextlib

import tensorflow as tf

from tfring.strategy import keras_patches
from tfring.strategy import ring_model
from tfring.strategy import step_rows

_RECORD = "_tfring_reduced_gradients"


class _Reduced:
    """What has been all-reduced in the optimizer call being traced.

    Args:
        variables: the gradients' variables, in order.
        all_of_them: every gradient the optimizer is handed in this call is reduced already.
    """

    def __init__(self, variables, all_of_them=False):
        self.variables = variables
        self.all_of_them = all_of_them
        self.ids = None  # the clipped gradients, once reduced


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


def _opened(optimizer, record, call):
    """`call()` with `record` open on `optimizer`."""
    outer = getattr(optimizer, _RECORD, None)
    setattr(optimizer, _RECORD, record)
    try:
        return call()
    finally:
        setattr(optimizer, _RECORD, outer)


def _reduced(optimizer, grads, variables, clipping):
    """Keras' own reduction of `grads` (record or not), sparse ones as rows when `clipping`."""
    extended = tf.distribute.get_strategy().extended
    with ring_model.tracing_flag(extended, "clipping_next") if clipping else contextlib.nullcontext():
        return [g for g, _ in optimizer._all_reduce_sum_gradients(list(zip(grads, variables)))]


def _open_record(original):
    def wrapper(self, grads, trainable_variables):
        record = getattr(self, _RECORD, None)
        if step_rows.current() is None or not clips(self) or (record is not None and record.all_of_them):
            return original(self, grads, trainable_variables)
        return _opened(self, _Reduced(list(trainable_variables)), lambda: original(self, grads, trainable_variables))

    return wrapper


def _reduce_then_clip(original):
    def wrapper(self, grads):
        record = getattr(self, _RECORD, None)
        if record is None or record.all_of_them:
            return original(self, grads)
        clipped = original(self, _reduced(self, grads, record.variables, clipping=True))
        record.ids = [id(g) for g in clipped if g is not None]
        return clipped

    return wrapper


def _pass_reduced(original):
    def wrapper(self, grads_and_vars):
        record = getattr(self, _RECORD, None)
        if record is None or not (record.all_of_them or record.ids is not None):
            return original(self, grads_and_vars)
        grads_and_vars = list(grads_and_vars)
        if record.all_of_them:
            return grads_and_vars
        if record.ids != [id(g) for g, _ in grads_and_vars if g is not None]:
            raise RuntimeError(
                "tfring: the gradients Keras' optimizer is about to all-reduce are not the ones "
                "RingStrategy reduced and clipped in this step (something changed them between "
                f"clipping and the update: {type(self).__name__}); reducing them again would be wrong")
        record.ids = None  # one update per clipping
        return grads_and_vars

    return wrapper


def _reduces_early(loss_scale_optimizer, grads, variables):
    """True when the wrap below may reduce first: a plain inner optimizer (a MultiOptimizer or a
    nested LossScaleOptimizer hands gradients to optimizers this record does not reach), without
    accumulation (it reduces once per k micro-steps), one gradient per variable."""
    import keras

    inner = loss_scale_optimizer.inner_optimizer
    nested = (keras.optimizers.LossScaleOptimizer, getattr(keras.optimizers, "MultiOptimizer", ()))
    return (step_rows.current() is not None and not isinstance(inner, nested)
            and not inner.gradient_accumulation_steps and len(grads) == len(variables))


def _reduce_scaled(loss_scale_optimizer, grads, variables):
    """The scaled gradients, all-reduced. With a wire type (`compression`), what travels is
    unscaled, as it was before: the scale (a power of two) comes off before and back after,
    exactly. Variables overwritten with their gradient (float8 scales) are never reduced."""
    inner = loss_scale_optimizer.inner_optimizer
    reduce = [k for k, v in enumerate(variables)
              if grads[k] is not None and not inner._overwrite_variable_with_gradient(v)]
    scale = loss_scale_optimizer.dynamic_scale if tf.distribute.get_strategy().extended.compressed else None
    sent = [grads[k] if scale is None else _times(grads[k], 1 / scale) for k in reduce]
    reduced = _reduced(inner, sent, [variables[k] for k in reduce], clipping=clips(inner))
    grads = list(grads)
    for k, g in zip(reduce, reduced):
        grads[k] = g if scale is None else _times(g, scale)
    return grads


def _times(gradient, factor):
    if isinstance(gradient, tf.IndexedSlices):
        return tf.IndexedSlices(gradient.values * tf.cast(factor, gradient.values.dtype), gradient.indices,
                                gradient.dense_shape)
    return gradient * tf.cast(factor, gradient.dtype)


def _reduce_before_the_finiteness_check(original):
    def wrapper(self, grads, trainable_variables=None):
        inner = self.inner_optimizer
        variables = list(trainable_variables) if trainable_variables is not None else \
            list(getattr(inner, "_trainable_variables", []))
        if not _reduces_early(self, grads, variables):
            return original(self, grads, trainable_variables)
        grads = _reduce_scaled(self, grads, variables)
        record = _Reduced(variables, all_of_them=True)
        return _opened(inner, record, lambda: original(self, grads, trainable_variables))

    return wrapper


PATCHES = [
    keras_patches.Patch("keras.src.optimizers.base_optimizer.BaseOptimizer", "_backend_apply_gradients",
                        _open_record, "under RingStrategy, clipping acts on the job's gradients"),
    keras_patches.Patch("keras.src.optimizers.base_optimizer.BaseOptimizer", "_clip_gradients",
                        _reduce_then_clip, "under RingStrategy, gradients are all-reduced before they are clipped"),
    keras_patches.Patch("keras.src.backend.tensorflow.optimizer.TFOptimizer", "_all_reduce_sum_gradients",
                        _pass_reduced, "gradients reduced early are not reduced again"),
    keras_patches.Patch("keras.src.optimizers.loss_scale_optimizer.LossScaleOptimizer", "apply",
                        _reduce_before_the_finiteness_check,
                        "under RingStrategy, LossScaleOptimizer checks the job's gradients, reduced in buckets"),
]


def install():
    """Wraps Keras' optimizer as the module docstring says. Idempotent.

    Example:

    >>> install()
    """
    keras_patches.apply(PATCHES)
