"""`hvd.DistributedOptimizer` for Keras 3: the wrapped optimizer averages gradients over the ranks.

Keras 3 sends every gradient through the optimizer's public `apply` (`apply_gradients`, `fit`'s
train step and custom loops alike). The distributed optimizer is the user's optimizer with one
more class in front of its own, whose `apply` reduces the gradients (Horovod's `op`, compression
and predivide factor; see `tfring.horovod.gradients`) and hands them on. With
`backward_passes_per_step=k` it adds each pass's gradients into local accumulators and reduces and
applies their sum (or mean, `average_aggregated_gradients=True`) on every k-th pass only. As in
Horovod, `iterations` counts passes (it also moves on the passes that apply nothing), and the
accumulators are kept out of the optimizer's variables (a saved optimizer loads into a plain one).

Under a `mixed_float16` policy the distributed optimizer is made around a `LossScaleOptimizer`
(Keras' `compile` would otherwise put one outside it, whose finiteness check would see each rank's
own gradients, and ranks could decide differently): the check then sees the reduced gradients,
the same on every rank.

Horovod 0.28.1's own wrapper overrides Keras 2 methods Keras 3 never calls, so on Keras 3 its
replicas train without averaging and drift apart, with no error.
"""

import contextlib

import keras
import tensorflow as tf

from tfring import checks
from tfring.horovod import basics
from tfring.horovod import compression as compression_lib
from tfring.horovod import gradients
from tfring.horovod import legacy_optimizer
from tfring.horovod import process_sets
from tfring.ops import ordering
from tfring.strategy.sharding import optimizer_state


class _Distributed:
    """Placed in front of the user's optimizer class (see `DistributedOptimizer`); the class
    carries Horovod's arguments in `_hvd_arguments`, so that `from_config` makes another such
    optimizer, as Horovod's does."""

    _hvd_arguments = {}

    def _hvd_setup(self):
        arguments = self._hvd_arguments
        settings = gradients.settings(arguments["compression"], arguments["sparse_as_dense"],
                                      arguments["gradient_predivide_factor"], "hvd.DistributedOptimizer",
                                      arguments.get("process_set", 0), arguments["op"])
        self._hvd = dict(settings=settings, op=arguments["op"], passes=arguments["backward_passes_per_step"],
                         average=arguments["average_aggregated_gradients"],
                         scale_local=arguments["scale_local_gradients"], local=set(), accumulators=None, count=None,
                         to_owners=False)
        if arguments.get("shard_optimizer_state") and basics.size() > 1:
            optimizer_state.shard_over(self, basics.rank(), basics.size())
            self._hvd["to_owners"] = arguments.get("shard_gradients", False)

    @classmethod
    def from_config(cls, config, custom_objects=None):
        """Another distributed optimizer of this class and configuration (Horovod's behaviour)."""
        made = super().from_config(config, custom_objects=custom_objects)
        made._hvd_setup()
        return made

    def register_local_var(self, var):
        """Marks `var` as worker-local: its gradient is not reduced (Horovod's `register_local_var`).

        Args:
            var: a variable of the model.
        """
        self._hvd["local"].add(id(var))

    def build(self, variables):
        """Builds the wrapped optimizer, and the accumulators when `backward_passes_per_step` > 1."""
        super().build(variables)
        self._hvd_accumulators(variables)

    def _hvd_accumulators(self, variables):
        if self._hvd["passes"] == 1 or self._hvd["accumulators"] is not None:
            return
        with tf.init_scope():  # plain variables, not the optimizer's: saved optimizers stay Keras' own
            self._hvd["accumulators"] = {id(v): tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False)
                                         for v in variables}
            self._hvd["count"] = tf.Variable(0, dtype=tf.int64, trainable=False)

    def _hvd_reduce(self, grads, variables):
        local = [k for k, v in enumerate(variables) if id(v) in self._hvd["local"]]
        owners = optimizer_state.owners_of(self, list(variables)) if self._hvd["to_owners"] else None
        return gradients.reduce(self._hvd["settings"], grads, self._hvd["op"], local, self._hvd["scale_local"],
                                variables=list(variables), owners=owners)

    def apply(self, grads, trainable_variables=None):
        """Reduces `grads` over the ranks, then applies them as the wrapped optimizer does.

        Args:
            grads: a list of gradients (tensors, `tf.IndexedSlices` or None).
            trainable_variables: their variables; default: those the optimizer was built with.

        Returns:
            What the wrapped optimizer's `apply` returns.
        """
        grads = list(grads)
        variables = list(trainable_variables) if trainable_variables is not None else None
        if not self.built:
            self.build(variables)
        variables = variables if variables is not None else list(self._trainable_variables)
        if self._hvd["passes"] == 1:
            return self._hvd_apply_reduced(self._hvd_reduce(grads, variables), variables, trainable_variables)
        return self._hvd_accumulate(self._hvd_apply_reduced, grads, variables, trainable_variables)

    def _hvd_apply_reduced(self, reduced, variables, trainable_variables):
        if not optimizer_state.sharded(self):
            return super().apply(reduced, trainable_variables)
        # Each rank updates the variables it owns; the owners hand the new values on.
        positions = [k for k, g in enumerate(reduced) if g is not None]
        return optimizer_state.apply_owned(lambda opt, g, v: super(_Distributed, opt).apply(g, v), self, reduced,
                                           variables, positions, lambda n, clipped: contextlib.nullcontext(),
                                           whole=not self._hvd["to_owners"])

    def _hvd_accumulate(self, apply, grads, variables, trainable_variables):
        passes, by_variable = self._hvd["passes"], self._hvd["accumulators"]
        missing = [v.path if hasattr(v, "path") else v.name for v in variables if id(v) not in by_variable]
        if missing:
            raise ValueError(f"hvd.DistributedOptimizer: gradients for variables it was not built with: {missing}")
        accumulators = [by_variable[id(v)] for v in variables]
        for acc, g in zip(accumulators, grads):
            if g is not None:
                acc.assign_add(tf.convert_to_tensor(g))
        count = self._hvd["count"]
        count.assign_add(1)

        def step():
            summed = [tf.identity(acc) if g is not None else None for acc, g in zip(accumulators, grads)]
            if self._hvd["average"]:
                summed = [s / tf.cast(passes, s.dtype) if s is not None else None for s in summed]
            apply(self._hvd_reduce(summed, variables), variables, trainable_variables)
            for acc in accumulators:
                acc.assign(tf.zeros_like(acc))
            return tf.constant(True)

        def pass_only():
            self.iterations.assign_add(1)  # Horovod counts every pass
            return tf.constant(False)

        # One link of the graph's collective chain: collectives built after it wait for its own.
        return ordering.ordered(lambda: tf.cond(tf.equal(count % passes, 0), step, pass_only))


def _distributed_class(cls, arguments):
    base = [c for c in cls.__mro__ if not issubclass(c, _Distributed)][0]  # the user's class
    return type(base.__name__, (_Distributed, base),
                {"__module__": base.__module__, "__doc__": base.__doc__, "_hvd_arguments": arguments})


def check_op(op, gradient_predivide_factor, average_aggregated_gradients=False):
    """Horovod's rule for a distributed optimizer's `op`, predivide factor and averaging of
    aggregated gradients.

    Raises:
        ValueError: `op` other than Average, Sum or Adasum, a predivide factor with another op
            than Average, or Adasum with `average_aggregated_gradients` (Horovod's messages).
    """
    if op not in (basics.Average, basics.Sum, basics.Adasum):
        raise ValueError("op currently only supports Average, Sum and Adasum")
    if gradient_predivide_factor != 1.0 and op != basics.Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if op == basics.Adasum and average_aggregated_gradients:
        raise ValueError("Adasum does not support average_aggregated_gradients == True")


def distribute(optimizer, compression=compression_lib.Compression.none, sparse_as_dense=False,
               gradient_predivide_factor=1.0, op=basics.Average, backward_passes_per_step=1,
               average_aggregated_gradients=False, scale_local_gradients=True, process_set=0,
               shard_optimizer_state=False, shard_gradients=False):
    """Turns `optimizer` itself (its state kept) into a distributed optimizer; `hvd.keras.load_model` uses it.

    `process_set` is a tfring process set id (0: every rank).

    Returns:
        `optimizer`, whose class now averages gradients first.
    """
    where = "hvd.DistributedOptimizer"
    check_op(op, gradient_predivide_factor, average_aggregated_gradients)
    arguments = dict(compression=compression, sparse_as_dense=bool(sparse_as_dense),
                     gradient_predivide_factor=gradient_predivide_factor, op=op,
                     backward_passes_per_step=checks.number(where, "backward_passes_per_step",
                                                            backward_passes_per_step, integer=True, above=0),
                     average_aggregated_gradients=bool(average_aggregated_gradients),
                     scale_local_gradients=bool(scale_local_gradients), process_set=process_set,
                     shard_optimizer_state=bool(shard_optimizer_state), shard_gradients=bool(shard_gradients))
    if shard_optimizer_state and (process_set != 0 or isinstance(optimizer, keras.optimizers.LossScaleOptimizer)):
        raise ValueError(f"{where}: shard_optimizer_state=True works over every rank (process_set 0) and without a "
                         f"LossScaleOptimizer (mixed_float16) so far")
    if shard_gradients and not shard_optimizer_state:
        raise ValueError(f"{where}: shard_gradients=True needs shard_optimizer_state=True (each rank receives the "
                         f"gradients of the variables whose optimizer state it keeps)")
    if shard_gradients and (compression is not compression_lib.Compression.none or gradient_predivide_factor != 1.0
                            or op == basics.Adasum):
        raise ValueError(f"{where}: shard_gradients=True reduces each gradient to its owner only, which compression, "
                         f"gradient_predivide_factor and op=hvd.Adasum cannot do yet: drop them or set "
                         f"shard_gradients=False")
    optimizer.__class__ = _distributed_class(type(optimizer), arguments)
    optimizer._hvd_setup()
    if optimizer.built:
        optimizer._hvd_accumulators(list(optimizer._trainable_variables))
    return optimizer


def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",  # noqa: N802 (Horovod's name)
                         compression=compression_lib.Compression.none, sparse_as_dense=False,
                         gradient_predivide_factor=1.0, op=basics.Average, backward_passes_per_step=1,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=process_sets.global_process_set, scale_local_gradients=True,
                         shard_optimizer_state=False, shard_gradients=False):
    """A Keras 3 optimizer like `optimizer` that averages gradients over the ranks before applying them.

    Horovod's `hvd.DistributedOptimizer`, with its arguments, order and defaults. The result is a
    new optimizer of the same class and configuration (`optimizer` itself is left as it was).

    Args:
        optimizer: a `keras.optimizers.Optimizer`.
        name: ignored (Keras 3 optimizers keep their own name).
        device_dense: ignored (tfring places the collective with its input).
        device_sparse: ignored.
        compression: `hvd.Compression.none` (default, exact) or `hvd.Compression.fp16` (approximate).
        sparse_as_dense: densify sparse gradients (e.g. an Embedding's) before they travel.
        gradient_predivide_factor: each rank sends g / f and the sum is multiplied by f / size.
        op: `hvd.Average` (default), `hvd.Sum` or `hvd.Adasum` (the Adasum of the ranks' gradients,
            as Horovod's Keras optimizer does; a power-of-two number of ranks).
        backward_passes_per_step: passes whose gradients are added locally before one reduction
            and one applied step.
        average_aggregated_gradients: divide the accumulated gradients by `backward_passes_per_step`.
        num_groups: deprecated in Horovod; ignored (tfring's buckets group gradients).
        groups: ignored (tfring's buckets group gradients).
        process_set: the `hvd.ProcessSet` to average over (default: every rank); a rank outside
            it applies its own gradients.
        scale_local_gradients: divide the gradients of variables registered with
            `register_local_var` by the number of ranks.
        shard_optimizer_state: tfring's own extension (not Horovod's): keep each variable's
            optimizer state on one rank only, about 1/N of it per rank, as
            `RingStrategy(shard_optimizer_state=True)` does (ZeRO stage 1; see
            `tfring.strategy.sharding.optimizer_state`). The weights stay those of the unsharded
            optimizer; `BroadcastGlobalVariablesCallback` leaves the sharded slots alone, and a save
            holds the whole state; `hvd.elastic.KerasState` syncs the model and leaves each rank's
            slots its own. Not with a process set, mixed_float16 or `global_clipnorm` yet.
        shard_gradients: tfring's own extension: with `shard_optimizer_state=True`, each rank also
            receives only the reduced gradients of the variables it owns (ZeRO stage 2; see
            `RingStrategy(shard_gradients=True)`). Not with `compression` or a predivide factor.

    Returns:
        The distributed optimizer.

    Raises:
        ValueError: `op` other than Average, Sum or Adasum; a bad `backward_passes_per_step`.
        NotImplementedError: `hvd.Adasum` over a number of ranks that is not a power of two.
        ValueError: a `process_set` that is not registered.

    Example:

    >>> opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01 * hvd.size()))
    >>> model.compile(optimizer=opt, loss="sparse_categorical_crossentropy")
    """
    set_id = process_sets.set_id(process_set, "hvd.DistributedOptimizer")
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError(f"hvd.DistributedOptimizer: tfring.horovod wraps Keras 3 optimizers "
                        f"(keras.optimizers.*), got {type(optimizer).__name__}")
    fresh = type(optimizer).from_config(optimizer.get_config())
    if keras.config.dtype_policy().name == "mixed_float16" and not isinstance(
            fresh, keras.optimizers.LossScaleOptimizer):
        fresh = keras.optimizers.LossScaleOptimizer(fresh)
    return distribute(fresh, compression, sparse_as_dense, gradient_predivide_factor, op, backward_passes_per_step,
                      average_aggregated_gradients, scale_local_gradients, set_id, shard_optimizer_state,
                      shard_gradients)


def PartialDistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",  # noqa: N802
                                compression=compression_lib.Compression.none, sparse_as_dense=False,
                                gradient_predivide_factor=1.0, op=basics.Average, backward_passes_per_step=1,
                                average_aggregated_gradients=False, groups=None,
                                process_set=process_sets.global_process_set, local_layers=None,
                                scale_local_gradients=True):
    """`DistributedOptimizer` whose `local_layers` keep their own gradients (Horovod's `horovod.keras` name).

    The weights of `local_layers` are registered with `register_local_var`: their gradients are
    not reduced, and are divided by the number of ranks when `scale_local_gradients`. The other
    arguments are `DistributedOptimizer`'s.

    Args:
        local_layers: a Keras layer or a list of them (None: as `DistributedOptimizer`).

    Returns:
        The distributed optimizer.

    Raises:
        ValueError: an item of `local_layers` is not a Keras layer; as `DistributedOptimizer`.

    Example:

    >>> opt = hvd.PartialDistributedOptimizer(keras.optimizers.SGD(0.1), local_layers=[model.layers[-1]])
    """
    local = gradients.local_layer_weights(local_layers, "hvd.PartialDistributedOptimizer")
    made = DistributedOptimizer(optimizer, name, device_dense, device_sparse, compression, sparse_as_dense,
                                gradient_predivide_factor, op, backward_passes_per_step, average_aggregated_gradients,
                                0, groups, process_set, scale_local_gradients)
    for w in local:
        made.register_local_var(w)
    return made


def tensorflow_distributed_optimizer(optimizer, name=None, use_locking=False, device_dense="", device_sparse="",
                                     compression=compression_lib.Compression.none, sparse_as_dense=False,
                                     backward_passes_per_step=1, op=basics.Average, gradient_predivide_factor=1.0,
                                     average_aggregated_gradients=False, num_groups=0, groups=None,
                                     process_set=process_sets.global_process_set, scale_local_gradients=True):
    """`horovod.tensorflow.DistributedOptimizer`: the same as `DistributedOptimizer`, with the argument
    order of Horovod's TensorFlow module (`use_locking` third, `backward_passes_per_step` before `op`).
    The other arguments are `DistributedOptimizer`'s.

    Args:
        optimizer: a Keras 3 optimizer, or a TF1 `tf.compat.v1.train.Optimizer` (graph mode; its
            gradients are reduced in `compute_gradients`, as Horovod does; see `legacy_optimizer`).
        use_locking: ignored (Keras 3 optimizers have no locking option).

    Returns:
        The distributed optimizer.

    Raises:
        TypeError: `optimizer` is neither a Keras 3 nor a TF1 optimizer.
        NotImplementedError: `backward_passes_per_step` > 1 with a TF1 optimizer.

    Example:

    >>> import tfring.horovod.tensorflow as hvd
    >>> opt = hvd.DistributedOptimizer(keras.optimizers.Adam(0.001 * hvd.size()))
    """
    if isinstance(optimizer, tf.compat.v1.train.Optimizer):
        if backward_passes_per_step != 1:
            raise NotImplementedError("hvd.DistributedOptimizer: backward_passes_per_step > 1 is supported with Keras "
                                      "optimizers only, not TF1 tf.compat.v1.train optimizers")
        check_op(op, gradient_predivide_factor)
        if op == basics.Adasum:
            raise NotImplementedError("hvd.DistributedOptimizer: op=hvd.Adasum with a TF1 tf.compat.v1.train "
                                      "optimizer (Horovod's delta optimizer) is not supported; use a Keras optimizer")
        return legacy_optimizer.LegacyDistributedOptimizer(optimizer, name, use_locking, compression, sparse_as_dense,
                                                           op, gradient_predivide_factor, process_set)
    return DistributedOptimizer(optimizer, name, device_dense, device_sparse, compression, sparse_as_dense,
                                gradient_predivide_factor, op, backward_passes_per_step, average_aggregated_gradients,
                                num_groups, groups, process_set, scale_local_gradients)
