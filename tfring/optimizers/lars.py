"""LARS: layer-wise adaptive rate scaling (You, Gitman, Ginsburg 2017), a Keras 3 optimizer.

Each variable's step is scaled by its trust ratio η‖w‖ / (‖g‖ + β‖w‖ + ε), so that layers whose
gradients are large relative to their weights do not diverge at large batch sizes. Weight decay β
is coupled (inside the ratio and the update), as in the paper; it is not Keras' decoupled decay.

Differences from other implementations, for users porting a recipe:
- TF 1.x contrib `LARSOptimizer` used β only in the ratio's denominator (decay had to come from the
  loss);
- TF Model Garden's `LARS` adds βw to g *before* the norms: ratio = η‖w‖ / ‖g + βw‖;
- NVIDIA apex `LARC` uses η = 0.02 and clips the local rate at the global one.
With weight_decay=0 the first two agree with this one.

The per-variable update runs as one fused C++ op (`tfring.ops.lars_update`: both norms and the
update in one kernel, velocity updated in place); where that op cannot run (no op library, a GPU
variable, XLA) the same update is composed from TensorFlow ops.
"""

import re

import keras
import tensorflow as tf

from tfring import checks
from tfring.strategy import keras_patches

# Biases and normalization parameters (matched against `variable.path`, e.g. "dense/bias",
# "batch_normalization/gamma").
DEFAULT_EXCLUDE = (r"\bbias\b", r"\bgamma\b", r"\bbeta\b")


# The private methods of Keras' optimizer that LARS calls or overrides.
KERAS_INTERNALS = [
    keras_patches.Internal("keras.optimizers.Optimizer", "_overwrite_variable_with_gradient", ("self", "variable"),
                           "no velocity for a variable Keras overwrites with its gradient, like float8 scales"),
    keras_patches.Internal("keras.optimizers.Optimizer", "_use_weight_decay", ("self", "variable"),
                           "Keras' own exclude_from_weight_decay(var_list=...) still counts"),
    keras_patches.Internal("keras.optimizers.Optimizer", "_get_variable_index", ("self", "variable"),
                           "the variable's velocity and settings"),
    keras_patches.Internal("keras.optimizers.Optimizer", "_apply_weight_decay", ("self", "variables"),
                           "overridden: LARS's decay is coupled, the base class must not decay again"),
]


def _patterns(what, patterns):
    if patterns is None:
        return None
    if isinstance(patterns, str) or not all(isinstance(p, str) for p in patterns):
        raise ValueError(f"LARS: {what} must be a list of regular expressions (strings), got {patterns!r}")
    for p in patterns:
        try:
            re.compile(p)
        except re.error as e:
            raise ValueError(f"LARS: {what} holds an invalid regular expression {p!r}: {e}") from None
    return list(patterns)


def _matches(patterns, variable):
    path = getattr(variable, "path", None) or getattr(variable, "name", "")
    return any(re.search(p, path) for p in patterns)


@keras.saving.register_keras_serializable(package="tfring")
class LARS(keras.optimizers.Optimizer):
    """Layer-wise adaptive rate scaling with (Nesterov) momentum and coupled weight decay.

    For each variable w with gradient g (after the gradient all-reduce, so ratios see global
    gradients):

        ratio = trust_coefficient * ‖w‖ / (‖g‖ + weight_decay * ‖w‖ + epsilon)
                (1 when ‖w‖ or ‖g‖ is 0, or w is excluded from layer adaptation)
        v ← momentum * v + lr * ratio * (g + weight_decay * w)
        w ← w − v            (nesterov: w ← w − (momentum * v + lr * ratio * (g + weight_decay * w)))

    Args:
        learning_rate: a float, a `keras.optimizers.schedules.LearningRateSchedule`, or a callable
            returning the rate. Defaults to 0.1.
        momentum: momentum factor, >= 0. Defaults to 0.9.
        nesterov: use Nesterov momentum. Defaults to False.
        weight_decay: coupled weight decay β, >= 0. Defaults to 1e-4.
        trust_coefficient: η, > 0. Defaults to 0.001.
        epsilon: added to the ratio's denominator, >= 0. Defaults to 0.
        exclude_from_layer_adaptation: regular expressions searched in each variable's path
            (`dense/bias`); matching variables use ratio 1. None: the same list as
            `exclude_from_weight_decay`.
        exclude_from_weight_decay: regular expressions; matching variables get no weight decay.
            None: biases and normalization parameters (`DEFAULT_EXCLUDE`); [] excludes nothing.
            `optimizer.exclude_from_weight_decay(var_list=...)` (Keras' method) also works.
        fused: True to require the fused op, False to always compose the update from TF ops,
            None (default) for the fused op wherever it can run.
        **kwargs: every standard Keras optimizer argument (`clipnorm`, `global_clipnorm`,
            `clipvalue`, `use_ema`, `ema_momentum`, `ema_overwrite_frequency`,
            `loss_scale_factor`, `gradient_accumulation_steps`, `name`).

    Example:

    >>> strategy = tfring.RingStrategy()
    >>> lr = tfring.scale_learning_rate(0.8, global_batch_size=4096)  # LARS's own base rate: sweep it
    >>> with strategy.scope():
    ...     model = make_model()
    ...     model.compile(optimizer=tfring.optimizers.LARS(lr, nesterov=True), loss="mse")
    """

    def __init__(self, learning_rate=0.1, momentum=0.9, nesterov=False, weight_decay=1e-4,
                 trust_coefficient=0.001, epsilon=0.0, exclude_from_layer_adaptation=None,
                 exclude_from_weight_decay=None, fused=None, name="lars", **kwargs):
        momentum = checks.number("LARS", "momentum", momentum, at_least=0)
        weight_decay = checks.number("LARS", "weight_decay", weight_decay, at_least=0)
        trust_coefficient = checks.number("LARS", "trust_coefficient", trust_coefficient, above=0)
        epsilon = checks.number("LARS", "epsilon", epsilon, at_least=0)
        checks.choice("LARS", "fused", fused, (None, True, False))
        super().__init__(learning_rate=learning_rate, weight_decay=weight_decay, name=name, **kwargs)
        self.momentum = momentum
        self.nesterov = bool(nesterov)
        self.trust_coefficient = trust_coefficient
        self.epsilon = epsilon
        self.fused = fused
        self._decay_patterns = _patterns("exclude_from_weight_decay", exclude_from_weight_decay)
        self._adapt_patterns = _patterns("exclude_from_layer_adaptation", exclude_from_layer_adaptation)

    def build(self, var_list):
        """Creates one velocity per variable (float32; float64 for float64 variables).

        Args:
            var_list: the model's trainable variables.
        """
        if self.built:
            return
        from tfring.ops import lars as lars_ops

        super().build(var_list)
        no_decay = DEFAULT_EXCLUDE if self._decay_patterns is None else self._decay_patterns
        no_adapt = no_decay if self._adapt_patterns is None else self._adapt_patterns
        self._velocities, self._decays, self._adapts = [], [], []
        for variable in var_list:
            dtype = lars_ops.velocity_dtype(variable.dtype)
            if self._overwrite_variable_with_gradient(variable):
                self._velocities.append(None)
            elif dtype == variable.dtype:
                self._velocities.append(self.add_variable_from_reference(variable, "velocity"))
            else:  # float16 variable: float32 velocity, colocated like Keras' own slots
                self._velocities.append(self._add_wide_velocity(variable, dtype))
            decays = not _matches(no_decay, variable) and self._use_weight_decay(variable)
            self._decays.append(self.weight_decay if decays else 0.0)
            self._adapts.append(not _matches(no_adapt, variable))

    def _add_wide_velocity(self, variable, dtype):
        colocate = variable.value if isinstance(variable, keras.Variable) else variable
        with self._distribution_strategy.extended.colocate_vars_with(colocate):
            return self.add_variable(shape=variable.shape, dtype=dtype,
                                     name=f"{variable.path.replace('/', '_')}_velocity")

    def _apply_weight_decay(self, variables):
        # LARS's decay is coupled: it is applied inside update_step, not decoupled by the base class.
        return

    def update_step(self, gradient, variable, learning_rate):
        """Applies one LARS step to `variable` (called by Keras per variable).

        Args:
            gradient: the (all-reduced) gradient.
            variable: the variable.
            learning_rate: the current global learning rate.
        """
        from tfring.ops import lars as lars_ops

        index = self._get_variable_index(variable)
        velocity = self._velocities[index]
        decay, adapt = self._decays[index], self._adapts[index]
        if isinstance(gradient, tf.IndexedSlices):
            gradient = tf.convert_to_tensor(gradient)
        reason = None if self.fused is False else lars_ops.fused_unavailable_reason(variable)
        if self.fused is True and reason is not None:
            raise RuntimeError(f"LARS(fused=True): the fused op cannot run here: {reason}")
        if self.fused is False or reason is not None:
            self._composed_update(variable, velocity, gradient, learning_rate, decay, adapt)
            return
        lars_ops.lars_update(variable, velocity, gradient, learning_rate, momentum=self.momentum,
                             weight_decay=decay, trust_coefficient=self.trust_coefficient,
                             epsilon=self.epsilon, adapt=adapt, nesterov=self.nesterov)

    def _composed_update(self, variable, velocity, gradient, learning_rate, decay, adapt):
        velocity = velocity.value if isinstance(velocity, keras.Variable) else velocity
        variable = variable.value if isinstance(variable, keras.Variable) else variable
        compute = velocity.dtype
        w = tf.cast(variable, compute)
        g = tf.cast(gradient, compute)
        local_lr = tf.cast(learning_rate, compute)
        if adapt:
            w_norm = tf.norm(w)
            g_norm = tf.norm(g)
            ratio = tf.where(tf.logical_and(w_norm > 0, g_norm > 0),
                             self.trust_coefficient * w_norm / (g_norm + decay * w_norm + self.epsilon),
                             tf.ones([], compute))
            local_lr = local_lr * ratio
        step = local_lr * (g + decay * w) if decay else local_lr * g
        new_velocity = self.momentum * tf.convert_to_tensor(velocity) + step
        velocity.assign(new_velocity)
        delta = self.momentum * new_velocity + step if self.nesterov else new_velocity
        variable.assign_sub(tf.cast(delta, variable.dtype))

    def rescale_momentum(self, factor):
        """Multiplies every velocity by `factor`: momentum correction when the rate changes.

        The velocity accumulates lr · ratio · g, so it carries the learning rate it was built
        with. When the rate changes from a to b, scaling the velocity by b / a (Goyal et al. 2017)
        keeps a jump in rate from acting on velocity built at the old rate.
        `tfring.callbacks.LearningRateWarmup` (and the other callbacks) call it when they change
        the rate with `momentum_correction=True`. Nothing to do before the optimizer is built or
        without momentum.

        Args:
            factor: the multiplier, new rate / old rate (a float).

        Example:

        >>> optimizer = tfring.optimizers.LARS(0.1)
        >>> model.compile(optimizer=optimizer, loss="mse")
        >>> model.fit(x, y, epochs=1)
        >>> optimizer.learning_rate = 0.05
        >>> optimizer.rescale_momentum(0.05 / 0.1)

        References:
            Goyal et al. 2017, "Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour",
            section 2.1 (momentum correction).
        """
        if not self.built or not self.momentum:
            return
        for velocity in self._velocities:
            if velocity is not None:
                velocity.assign(velocity * factor)

    def get_config(self):
        """The optimizer's configuration (`from_config` rebuilds it).

        Returns:
            A dict.
        """
        config = super().get_config()
        config.update({
            "momentum": self.momentum,
            "nesterov": self.nesterov,
            "trust_coefficient": self.trust_coefficient,
            "epsilon": self.epsilon,
            "exclude_from_layer_adaptation": self._adapt_patterns,
            "exclude_from_weight_decay": self._decay_patterns,
            "fused": self.fused,
        })
        return config
