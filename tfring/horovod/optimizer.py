"""`hvd.DistributedOptimizer` for Keras 3: the wrapped optimizer averages gradients over the ranks.

Keras 3 sends every gradient through the optimizer's public `apply` (`apply_gradients`, `fit`'s
train step and custom loops alike). The distributed optimizer is the user's optimizer with one
more class in front of its own, whose `apply` reduces the gradients (Horovod's `op`, compression
and predivide factor; see `tfring.horovod.gradients`) and hands them on. With
`backward_passes_per_step=k` it adds each pass's gradients into local accumulators and reduces and
applies their sum (or mean, `average_aggregated_gradients=True`) on every k-th pass only: the
optimizer's `iterations` count applied steps, as Horovod's do.

Horovod 0.28.1's own wrapper overrides Keras 2 methods Keras 3 never calls, so on Keras 3 its
replicas train without averaging and drift apart, with no error.
"""

import tensorflow as tf

from tfring import checks
from tfring.horovod import basics
from tfring.horovod import compression as compression_lib
from tfring.horovod import gradients
from tfring.horovod import process_sets


class _Distributed:
    """Placed in front of the user's optimizer class (see `DistributedOptimizer`); the class
    carries Horovod's arguments in `_hvd_arguments`, so that `from_config` makes another such
    optimizer, as Horovod's does."""

    _hvd_arguments = {}

    def _hvd_setup(self):
        arguments = self._hvd_arguments
        settings = gradients.settings(arguments["compression"], arguments["sparse_as_dense"],
                                      arguments["gradient_predivide_factor"], "hvd.DistributedOptimizer")
        self._hvd = dict(settings=settings, op=arguments["op"], passes=arguments["backward_passes_per_step"],
                         average=arguments["average_aggregated_gradients"],
                         scale_local=arguments["scale_local_gradients"], local=set(), accumulators=None, count=None)

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
        if self._hvd["passes"] > 1 and self._hvd["accumulators"] is None:
            self._hvd["accumulators"] = [self.add_variable_from_reference(v, "hvd_accumulated") for v in variables]
            self._hvd["count"] = self.add_variable((), initializer="zeros", dtype="int64", name="hvd_passes")

    def _hvd_reduce(self, grads, variables):
        local = [k for k, v in enumerate(variables) if id(v) in self._hvd["local"]]
        return gradients.reduce(self._hvd["settings"], grads, self._hvd["op"], local, self._hvd["scale_local"])

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
            return super().apply(self._hvd_reduce(grads, variables), trainable_variables)
        return self._hvd_accumulate(super().apply, grads, variables, trainable_variables)

    def _hvd_accumulate(self, apply, grads, variables, trainable_variables):
        passes, accumulators = self._hvd["passes"], self._hvd["accumulators"]
        for acc, g in zip(accumulators, grads):
            if g is not None:
                acc.assign_add(tf.convert_to_tensor(g))
        count = self._hvd["count"]
        count.assign_add(1)

        def step():
            summed = [tf.identity(acc.value) if g is not None else None for acc, g in zip(accumulators, grads)]
            if self._hvd["average"]:
                summed = [s / tf.cast(passes, s.dtype) if s is not None else None for s in summed]
            apply(self._hvd_reduce(summed, variables), trainable_variables)
            for acc in accumulators:
                acc.assign(tf.zeros_like(acc))
            return tf.constant(True)

        return tf.cond(tf.equal(count % passes, 0), step, lambda: tf.constant(False))


def _distributed_class(cls, arguments):
    base = [c for c in cls.__mro__ if not issubclass(c, _Distributed)][0]  # the user's class
    return type(base.__name__, (_Distributed, base),
                {"__module__": base.__module__, "__doc__": base.__doc__, "_hvd_arguments": arguments})


def distribute(optimizer, compression=compression_lib.Compression.none, sparse_as_dense=False,
               gradient_predivide_factor=1.0, op=basics.Average, backward_passes_per_step=1,
               average_aggregated_gradients=False, scale_local_gradients=True):
    """Turns `optimizer` itself (its state kept) into a distributed optimizer; `hvd.keras.load_model` uses it.

    Returns:
        `optimizer`, whose class now averages gradients first.
    """
    where = "hvd.DistributedOptimizer"
    if op not in (basics.Average, basics.Sum):
        raise ValueError("op currently only supports Average and Sum")
    arguments = dict(compression=compression, sparse_as_dense=bool(sparse_as_dense),
                     gradient_predivide_factor=gradient_predivide_factor, op=op,
                     backward_passes_per_step=checks.number(where, "backward_passes_per_step",
                                                            backward_passes_per_step, integer=True, above=0),
                     average_aggregated_gradients=bool(average_aggregated_gradients),
                     scale_local_gradients=bool(scale_local_gradients))
    optimizer.__class__ = _distributed_class(type(optimizer), arguments)
    optimizer._hvd_setup()
    if optimizer.built:
        optimizer._hvd_accumulators(list(optimizer._trainable_variables))
    return optimizer


def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",  # noqa: N802 (Horovod's name)
                         compression=compression_lib.Compression.none, sparse_as_dense=False,
                         gradient_predivide_factor=1.0, op=basics.Average, backward_passes_per_step=1,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=process_sets.global_process_set, scale_local_gradients=True):
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
        op: `hvd.Average` (default) or `hvd.Sum`.
        backward_passes_per_step: passes whose gradients are added locally before one reduction
            and one applied step.
        average_aggregated_gradients: divide the accumulated gradients by `backward_passes_per_step`.
        num_groups: deprecated in Horovod; ignored (tfring's buckets group gradients).
        groups: ignored (tfring's buckets group gradients).
        process_set: only `hvd.global_process_set`.
        scale_local_gradients: divide the gradients of variables registered with
            `register_local_var` by the number of ranks.

    Returns:
        The distributed optimizer.

    Raises:
        ValueError: `op` other than Average or Sum; a bad `backward_passes_per_step`.
        NotImplementedError: another `process_set`.

    Example:

    >>> opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01 * hvd.size()))
    >>> model.compile(optimizer=opt, loss="sparse_categorical_crossentropy")
    """
    process_sets.check_global(process_set, "hvd.DistributedOptimizer")
    fresh = type(optimizer).from_config(optimizer.get_config())
    return distribute(fresh, compression, sparse_as_dense, gradient_predivide_factor, op, backward_passes_per_step,
                      average_aggregated_gradients, scale_local_gradients)
