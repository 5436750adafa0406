"""The door: gradients are all-reduced where they enter the optimizer, before Keras looks at them.

In a RingStrategy step with more than one rank, the wrap of the optimizer's public `apply` (and of
`LossScaleOptimizer.apply`) averages the gradients it is handed over the ranks, each rank weighed
by its rows (each rank's gradients are of the loss one process computes on its rows: the rule in
`step_rows`), in buckets through the communication hook (see `reduction`), then runs the rest of
Keras' `apply` on the job's gradients, as one process would:

- clipping (`clipnorm`, `global_clipnorm`, `clipvalue`) clips the sum, not each rank's share (two
  shares clipped to a norm of c could add up to 2c); sparse gradients about to be clipped travel
  as rows (one process clips the rows its batch looked up);
- `LossScaleOptimizer`'s finiteness check sees the job's gradients, so every rank takes the same
  branch, and the buckets travel before the check instead of after the whole backward pass;
- Keras' own gradient all-reduce, later in `apply`, is passed through: the door opens a `Frame`
  on the strategy that `RingExtended._batch_reduce_to` honours, once per `apply`.

A `LossScaleOptimizer`'s door reduces for every optimizer inside it (a `MultiOptimizer`'s, a nested
one's): their doors see its frame and only pass their gradients through.

Gradient accumulation (`gradient_accumulation_steps=k`) keeps Keras' path, so that the gradients
travel once per k micro-steps: the door weighs each micro-step's gradients by the rank's rows (see
`accumulation`) and Keras all-reduces the accumulated sum on the micro-step that applies it; when
that optimizer also clips, the wrap of `_clip_gradients` reduces the sum just before it is clipped.
"""

import tensorflow as tf

from tfring.strategy import keras_patches
from tfring.strategy import step_rows
from tfring.strategy import strategy_base
from tfring.strategy.gradients import accumulation
from tfring.strategy.sharding import optimizer_state


class Frame:
    """What the door did in the `apply` being traced, read by the strategy's batch reduction.

    Args:
        passes: how many gradients the next batch all-reduce of this `apply` may pass through,
            reduced already; None: it reduces as usual.
        all_reduced: every gradient handed to an optimizer inside this one is reduced already
            (a `LossScaleOptimizer`'s door).
        zeroed: a rank without rows has zeroed its gradients already (accumulation).
        reduce_at_clipping: the gradients are reduced just before they are clipped (accumulation).
        clipped: the gradients were clipped already, over every variable's (a sharded optimizer
            updates only its own variables' and must not clip those again).
    """

    def __init__(self, passes=None, all_reduced=False, zeroed=False, reduce_at_clipping=False, clipped=False):
        self.passes = passes
        self.all_reduced = all_reduced
        self.zeroed = zeroed
        self.reduce_at_clipping = reduce_at_clipping
        self.clipped = clipped

    def pass_through(self, values):
        """True when `values` are the gradients reduced at the door (then only once).

        Args:
            values: the tensors of a batch all-reduce.

        Returns:
            bool.

        Raises:
            RuntimeError: the door reduced another number of gradients (reducing these again
                would multiply them by the number of ranks; passing them would leave them local).
        """
        if self.passes is None:
            return False
        if len(values) != self.passes:
            raise RuntimeError(
                f"tfring: the optimizer was handed {self.passes} gradients, which RingStrategy all-reduced, "
                f"and then asked to all-reduce {len(values)} tensors in the same apply(): tfring cannot "
                f"tell which of them are the gradients (an optimizer that changes the list inside apply() "
                f"is not supported under RingStrategy)")
        self.passes = None  # one update per apply
        return True


def clips(optimizer):
    """True when `optimizer`, or one inside it, clips gradients (`clipnorm`, `global_clipnorm`,
    `clipvalue`).

    Args:
        optimizer: a Keras optimizer.

    Returns:
        bool.

    Example:

    >>> clips(keras.optimizers.SGD(0.1, clipnorm=1.0))
    True
    """
    if any((getattr(optimizer, name, None) or 0) > 0 for name in ("clipnorm", "global_clipnorm", "clipvalue")):
        return True
    return any(clips(inner) for inner in _inner_optimizers(optimizer))


def _inner_optimizers(optimizer):
    inner = getattr(optimizer, "inner_optimizer", None)
    return [inner] if inner is not None else list(getattr(optimizer, "optimizers", None) or [])


def _accumulates(optimizer):
    return bool(getattr(optimizer, "gradient_accumulation_steps", None)) or any(
        _accumulates(inner) for inner in _inner_optimizers(optimizer))


def _step_extended():
    """The strategy's `extended` while a RingStrategy step of more than one rank is traced, else None."""
    return tf.distribute.get_strategy().extended if step_rows.current() is not None else None


def _variables(optimizer, grads, trainable_variables):
    """The variables `grads` belong to, or None when they do not pair one to one."""
    variables = trainable_variables if trainable_variables is not None else \
        getattr(optimizer, "_trainable_variables", None)
    variables = list(variables) if variables is not None else []
    return variables if len(variables) == len(grads) else None


def _travelling(optimizer, grads, trainable_variables):
    """The positions of the gradients that travel: not None, and not of a variable Keras overwrites
    with its gradient (float8 scales: each rank's own, never reduced). None when the gradients do
    not pair with the variables one to one (Keras' own path then reduces them)."""
    variables = _variables(optimizer, grads, trainable_variables)
    if variables is None:
        return None
    return [k for k, (g, v) in enumerate(zip(grads, variables))
            if g is not None and not getattr(v, "overwrite_with_gradient", False)]


def _reduce(extended, grads, positions, as_rows, variables, scale=None, weighted=False):
    """`grads` with those at `positions` averaged over the ranks, each rank weighed by its rows
    (`step_rows`: each rank's gradients are of its own rows' loss), or summed when `weighted` (they
    were weighed already: `accumulation`). With `scale` (a loss scale), what travels is unscaled:
    the scale (a power of two) comes off before and back after, exactly. `variables` pair with
    `grads` (None: unknown), for the hook's per-variable state."""
    sent = [grads[k] if scale is None else _times(grads[k], 1 / scale) for k in positions]
    owners = [variables[k] for k in positions] if variables is not None else None
    if weighted:
        reduced = extended.reduce_gradients(sent, tf.distribute.ReduceOp.SUM, as_rows=as_rows, variables=owners)
    else:
        reduced = extended.reduce_gradients(sent, tf.distribute.ReduceOp.MEAN, as_rows=as_rows, by_rows=True,
                                            variables=owners)
    grads = list(grads)
    for k, g in zip(positions, reduced):
        grads[k] = g if scale is None else _times(g, scale)
    return grads


def _reduce_to_owners(extended, optimizer, grads, positions, variables):
    """`grads` with those at `positions` averaged over the ranks as `_reduce` does, each dense one
    on the rank that owns its variable alone (None on the others); sparse ones reach every rank."""
    owners = optimizer_state.owners_of(optimizer, variables)
    reduced = extended.reduce_gradients_to_owners([grads[k] for k in positions], [owners[k] for k in positions],
                                                  as_rows=clips(optimizer), by_rows=True,
                                                  variables=[variables[k] for k in positions])
    grads = list(grads)
    for k, g in zip(positions, reduced):
        grads[k] = g
    return grads


def _times(gradient, factor):
    if isinstance(gradient, tf.IndexedSlices):
        return tf.IndexedSlices(gradient.values * tf.cast(factor, gradient.values.dtype), gradient.indices,
                                gradient.dense_shape)
    return gradient * tf.cast(factor, gradient.dtype)


def _door(original):
    def apply(self, grads, trainable_variables=None):
        extended = _step_extended()
        grads = list(grads)
        positions = _travelling(self, grads, trainable_variables) if extended is not None else None
        if not positions:
            return original(self, grads, trainable_variables)
        outer = extended.gradient_frame
        variables = _variables(self, grads, trainable_variables)
        if optimizer_state.sharded(self) and not self.gradient_accumulation_steps:
            return _apply_sharded(original, self, extended, grads, positions, variables)
        if outer is not None and outer.all_reduced:  # inside a LossScaleOptimizer's door
            frame = Frame(passes=len(positions))
        elif self.gradient_accumulation_steps:  # Keras reduces the sum, once per k micro-steps
            grads = accumulation.weighted_by_rows(grads, positions)
            frame = Frame(zeroed=True, reduce_at_clipping=clips(self))
        else:
            grads = _reduce(extended, grads, positions, clips(self), variables)
            frame = Frame(passes=len(positions))
        with strategy_base.while_traced(extended, "gradient_frame", frame):
            return original(self, grads, trainable_variables)

    return apply


def _apply_sharded(original, optimizer, extended, grads, positions, variables):
    """A sharded optimizer's `apply` (`sharding.optimizer_state`): the gradients all-reduced, or each
    reduced to its owner (`shard_gradients`), unless a `LossScaleOptimizer` reduced them already;
    then the update of the variables this rank owns."""
    outer = extended.gradient_frame
    whole = not extended.shards_gradients
    if outer is not None and outer.all_reduced and not whole:
        raise ValueError("tfring: shard_gradients=True does not support a LossScaleOptimizer (mixed "
                         "precision) yet: its finiteness check needs every gradient on every rank; use "
                         "shard_gradients=False (the optimizer state stays sharded)")
    if not whole:
        grads = _reduce_to_owners(extended, optimizer, grads, positions, variables)
    elif outer is None or not outer.all_reduced:
        grads = _reduce(extended, grads, positions, clips(optimizer), variables)
    return optimizer_state.apply_owned(
        original, optimizer, grads, variables, positions,
        lambda n, clipped: strategy_base.while_traced(extended, "gradient_frame", Frame(passes=n, clipped=clipped)),
        whole=whole)


def _loss_scale_door(original):
    def apply(self, grads, trainable_variables=None):
        extended = _step_extended()
        grads = list(grads)
        positions = _travelling(self.inner_optimizer, grads, trainable_variables) if extended is not None else None
        outer = extended.gradient_frame if extended is not None else None
        if not positions or (outer is not None and outer.all_reduced) or _accumulates(self):
            return original(self, grads, trainable_variables)
        scale = None if extended.gradient_settings.exact else self.dynamic_scale
        grads = _reduce(extended, grads, positions, clips(self),
                        _variables(self.inner_optimizer, grads, trainable_variables), scale=scale)
        with strategy_base.while_traced(extended, "gradient_frame", Frame(all_reduced=True)):
            return original(self, grads, trainable_variables)

    return apply


def _reduce_then_clip(original):
    def clip(self, grads):
        extended = _step_extended()
        frame = extended.gradient_frame if extended is not None else None
        if frame is not None and frame.clipped:
            return grads
        if frame is None or not frame.reduce_at_clipping:
            return original(self, grads)
        positions = [k for k, g in enumerate(grads) if g is not None]
        frame.reduce_at_clipping = False
        frame.passes = len(positions)
        return original(self, _reduce(extended, grads, positions, True, _variables(self, grads, None), weighted=True))

    return clip


def _marks_gradients(original):
    def all_reduce_sum_gradients(self, grads_and_vars):
        extended = tf.distribute.get_strategy().extended
        if not hasattr(extended, "reducing_gradients"):
            return original(self, grads_and_vars)
        grads_and_vars = list(grads_and_vars)
        variables = [v for g, v in grads_and_vars if g is not None]  # Keras reduces the gradients that exist
        with strategy_base.while_traced(extended, "reducing_gradients", variables):
            return original(self, grads_and_vars)

    return all_reduce_sum_gradients


_APPLY = ("self", "grads", "trainable_variables")

PATCHES = [
    keras_patches.Patch("keras.optimizers.Optimizer", "apply", _door,
                        "under RingStrategy, gradients are all-reduced as they enter the optimizer", parameters=_APPLY),
    keras_patches.Patch("keras.optimizers.LossScaleOptimizer", "apply", _loss_scale_door,
                        "under RingStrategy, LossScaleOptimizer checks the job's gradients, reduced in buckets",
                        parameters=_APPLY),
    keras_patches.Patch("keras.src.optimizers.base_optimizer.BaseOptimizer", "_clip_gradients",
                        _reduce_then_clip,
                        "with gradient accumulation, the accumulated gradients are all-reduced before they "
                        "are clipped", parameters=("self", "grads")),
    keras_patches.Patch("keras.src.backend.tensorflow.optimizer.TFOptimizer", "_all_reduce_sum_gradients",
                        _marks_gradients,
                        "under RingStrategy, only Keras' gradient all-reduce reaches the communication hook: "
                        "every other all_reduce (synchronized batch norm, a step's own) stays exact",
                        parameters=("self", "grads_and_vars")),
]
