"""`hvd.DistributedGradientTape`: a `tf.GradientTape` whose `gradient()` averages over the ranks.

For custom training loops, as in Horovod: record the forward pass with a plain tape, wrap it, and
ask it for gradients; they come back reduced (identical on every rank), through the same
reduction as `hvd.DistributedOptimizer`'s.

    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
"""

import tensorflow as tf

from tfring.horovod import basics
from tfring.horovod import compression as compression_lib
from tfring.horovod import gradients
from tfring.horovod import process_sets


class _Distributed:
    """Placed in front of the tape's class (see `DistributedGradientTape`)."""

    def register_local_source(self, source):
        """Marks `source` as worker-local: its gradient is not reduced (Horovod's name).

        Args:
            source: a variable or tensor passed to `gradient`.
        """
        self._hvd_local.add(id(source))

    def gradient(self, target, sources, output_gradients=None, unconnected_gradients=tf.UnconnectedGradients.NONE,
                 use_generic_names=False):
        """The gradients of `target` with respect to `sources`, averaged (or summed) over the ranks.

        Args:
            target: a tensor (or structure of tensors) to differentiate.
            sources: a variable, tensor or nested structure of them.
            output_gradients: as `tf.GradientTape.gradient`.
            unconnected_gradients: as `tf.GradientTape.gradient`.
            use_generic_names: ignored (Horovod names its ops with it).

        Returns:
            The gradients, structured like `sources`; identical on every rank.
        """
        grads = super().gradient(target, sources, output_gradients, unconnected_gradients)
        flat_sources, flat_grads = tf.nest.flatten(sources), tf.nest.flatten(grads, expand_composites=False)
        local = [k for k, s in enumerate(flat_sources) if id(s) in self._hvd_local]
        reduced = gradients.reduce(self._hvd_settings, flat_grads, self._hvd_op, local, self._hvd_scale_local,
                                   variables=flat_sources)
        return tf.nest.pack_sequence_as(grads, reduced)

    def get_local_and_global_gradients(self, target, sources, output_gradients=None, use_generic_names=False):
        """Horovod's split of `gradient`'s result: `(local pairs, global pairs)`, each a list of (source, grad)."""
        grads = self.gradient(target, sources, output_gradients)
        pairs = list(zip(sources, grads))
        return ([p for p in pairs if id(p[0]) in self._hvd_local], [p for p in pairs if id(p[0]) not in self._hvd_local])


def DistributedGradientTape(gradtape, device_dense="", device_sparse="",  # noqa: N802 (Horovod's name)
                            compression=compression_lib.Compression.none, sparse_as_dense=False, op=basics.Average,
                            gradient_predivide_factor=1.0, num_groups=0, groups=None,
                            process_set=process_sets.global_process_set, scale_local_gradients=True):
    """A tape like `gradtape` (the same recording) whose `gradient()` reduces over the ranks.

    Horovod's `hvd.DistributedGradientTape`, with its arguments, order and defaults.

    Args:
        gradtape: a `tf.GradientTape` that recorded the forward pass.
        device_dense: ignored.
        device_sparse: ignored.
        compression: `hvd.Compression.none` (default, exact) or `hvd.Compression.fp16`.
        sparse_as_dense: densify sparse gradients before they travel.
        op: `hvd.Average` (default), `hvd.Sum` or `hvd.Adasum` (the Adasum of the ranks' gradients).
        gradient_predivide_factor: each rank sends g / f and the sum is multiplied by f / size.
        num_groups: ignored (tfring's buckets group gradients).
        groups: ignored.
        process_set: the `hvd.ProcessSet` to average over (default: every rank); on a rank outside
            it, `gradient()` returns the local gradients.
        scale_local_gradients: divide local sources' gradients by the number of ranks.

    Returns:
        The distributed tape.

    Raises:
        ValueError: `gradient_predivide_factor` with an op other than Average, or an op other than
            Average, Sum or Adasum.
        NotImplementedError: `hvd.Adasum` over a number of ranks that is not a power of two.

    Example:

    >>> tape = hvd.DistributedGradientTape(tape)
    >>> grads = tape.gradient(loss, model.trainable_variables)
    """
    set_id = process_sets.set_id(process_set, "hvd.DistributedGradientTape")
    if gradient_predivide_factor != 1.0 and op != basics.Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if op not in (basics.Average, basics.Sum, basics.Adasum):
        raise ValueError("hvd.DistributedGradientTape: op must be hvd.Average, hvd.Sum or hvd.Adasum")
    return _wrapped(gradtape, _Distributed, _hvd_settings=gradients.settings(
        compression, sparse_as_dense, gradient_predivide_factor, "hvd.DistributedGradientTape", set_id, op),
        _hvd_op=op, _hvd_scale_local=bool(scale_local_gradients), _hvd_local=set())


def PartialDistributedGradientTape(gradtape, device_dense="", device_sparse="",  # noqa: N802 (Horovod's name)
                                   compression=compression_lib.Compression.none, sparse_as_dense=False,
                                   op=basics.Average, gradient_predivide_factor=1.0, local_layers=None,
                                   process_set=process_sets.global_process_set, scale_local_gradients=True):
    """`DistributedGradientTape` whose `local_layers`' variables keep their own gradients (Horovod's name).

    The other arguments are `DistributedGradientTape`'s.

    Args:
        local_layers: a Keras layer or list of them, whose trainable weights are local sources.

    Returns:
        The distributed tape.
    """
    tape = DistributedGradientTape(gradtape, compression=compression, sparse_as_dense=sparse_as_dense, op=op,
                                   gradient_predivide_factor=gradient_predivide_factor, process_set=process_set,
                                   scale_local_gradients=scale_local_gradients)
    for w in gradients.local_layer_weights(local_layers, "hvd.PartialDistributedGradientTape"):
        tape.register_local_source(w)
    return tape


def _wrapped(tape, mixin, **attributes):
    """A new object of class (mixin, type(tape)) sharing `tape`'s recording."""
    cls = type(type(tape).__name__, (mixin, type(tape)), {"__module__": type(tape).__module__})
    made = cls.__new__(cls)
    made.__dict__.update(tape.__dict__)
    made.__dict__.update(attributes)
    return made
