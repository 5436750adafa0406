"""How Horovod's gradients travel on tfring: one `reduction.GradientSettings` and a communication hook.

`hvd.DistributedOptimizer` and `hvd.DistributedGradientTape` both reduce through
`tfring.strategy.gradients.reduction.reduce_gradients`, RingStrategy's own path: dense gradients in
buckets (each bucket's allreduce starts as soon as its gradients exist, overlapping the rest of the
backward pass in a graph), sparse ones as rows. Horovod's `compression` and
`gradient_predivide_factor` become the communication hook below.
"""

import dataclasses

import keras
import tensorflow as tf

from tfring import config
from tfring import runtime
from tfring.horovod import basics
from tfring.horovod import compression as compression_lib
from tfring.compression import adasum
from tfring.compression import default_hooks
from tfring.compression import registry
from tfring.strategy.gradients import buckets
from tfring.strategy.gradients import reduction


@dataclasses.dataclass(frozen=True)
class HorovodHookState:
    """What `horovod_hook` needs: Horovod's compressor and predivide factor, the job's size, and
    whether the op is `hvd.Adasum`."""

    compressor: object
    predivide: float
    size: int
    adasum: bool = False


def horovod_hook(state, bucket):
    """A bucket travels as Horovod sends it: compressed by `state.compressor`; with a predivide
    factor f (and op "mean"), each rank sends g / f and the sum is multiplied by f / size; with
    `hvd.Adasum`, combined by Adasum (`tfring.compression.adasum`).

    Args:
        state: a `HorovodHookState`.
        bucket: a `tfring.compression.GradientBucket`.

    Returns:
        A `Future` of the reduced gradients.
    """
    grads = bucket.gradients
    predivide = state.predivide != 1.0 and bucket.op == "mean"
    if predivide:
        grads = [g / tf.cast(state.predivide, g.dtype) for g in grads]
    sent, contexts = zip(*[state.compressor.compress(g) for g in grads])
    op = "sum" if predivide else bucket.op

    def restore(reduced):
        out = [state.compressor.decompress(r, c) for r, c in zip(reduced, contexts)]
        return [r * tf.cast(state.predivide / state.size, r.dtype) for r in out] if predivide else out

    if state.adasum:
        return adasum.combined(bucket, sent).then(restore)
    return bucket.allreduce(list(sent), op).then(restore)


def settings(compression, sparse_as_dense, gradient_predivide_factor, where, process_set=0, op=basics.Average):
    """The `GradientSettings` for Horovod's arguments.

    Args:
        compression: a Horovod compressor (`hvd.Compression.none`, `.fp16` or a `Compressor` subclass).
        sparse_as_dense: densify sparse gradients before they travel.
        gradient_predivide_factor: Horovod's factor (1.0: none).
        where: the public name called, for messages.
        process_set: the tfring process set id to average over (0: every rank).
        op: Horovod's op; `hvd.Adasum` combines the gradients by Adasum.

    Returns:
        A `reduction.GradientSettings`.

    Raises:
        NotImplementedError: `hvd.Adasum` over a number of ranks that is not a power of two.
        ValueError: `hvd.Adasum` with a tfring compressor.
    """
    tfring_compressor = registry.is_compressor(compression)
    if not tfring_compressor and not (hasattr(compression, "compress") and hasattr(compression, "decompress")):
        raise TypeError(f"{where}: compression must be hvd.Compression.none, hvd.Compression.fp16, a "
                        f"Compressor or a tfring compressor (tfring.compression.PowerSGD(...)), got {compression!r}")
    factor = float(gradient_predivide_factor)
    if not factor > 0:
        raise ValueError(f"{where}: gradient_predivide_factor must be > 0, got {gradient_predivide_factor!r}")
    if tfring_compressor and factor != 1.0:
        raise ValueError(f"{where}: gradient_predivide_factor applies to Horovod's compressors only, not to "
                         f"{compression!r}: leave it at 1.0")
    size = len(runtime.process_set_ranks(process_set))
    is_adasum = basics.tfring_op(op, where, size) == "adasum"
    if is_adasum and tfring_compressor:
        raise ValueError(f"{where}: op=hvd.Adasum combines the gradients themselves; {compression!r} cannot "
                         f"compress them on the way: use Horovod's compressors or none")
    exact = compression is compression_lib.Compression.none and factor == 1.0 and not is_adasum
    if tfring_compressor:  # the same hook RingStrategy(compression=...) uses, with a state of its own
        state, hook = registry.for_compression(compression, where)
    else:
        hook, state = (default_hooks.allreduce_hook, None) if exact else (
            horovod_hook, HorovodHookState(compression, factor, size, is_adasum))
    return reduction.GradientSettings(size, _bucket_bytes(size), bool(sparse_as_dense), hook, state,
                                      process_set=process_set)


def _bucket_bytes(size):
    """RingStrategy's bucket size (without its tuning), or 0 (one collective) where this process sees a
    GPU: the buckets' start/done ops run on CPUs only. Decided without a collective, since Horovod's
    optimizers are made (and copied by `from_config`) on one rank as well as on all; ranks that decide
    differently fail at the first step with the collectives' mismatch error."""
    on_cpu = not tf.config.list_logical_devices("GPU")
    return 0 if size == 1 else buckets.on_device(buckets.untuned(config.Config.resolve().bucket_bytes), on_cpu)


def reduce(gradient_settings, grads, op, local=(), scale_local_gradients=True, variables=None, owners=None):
    """This rank's gradients averaged (or summed) over the ranks, Horovod's way; as they are on a
    rank outside the settings' process set (Horovod's rule).

    Args:
        gradient_settings: from `settings`.
        grads: a list of tensors, `tf.IndexedSlices` or None.
        op: `hvd.Average`, `hvd.Sum` or `hvd.Adasum` (the settings' hook combines the ranks' own
            gradients: they travel as for `hvd.Average`).
        local: positions in `grads` of worker-local variables: not reduced, and divided by the
            job's size when `scale_local_gradients` (Horovod's `register_local_var`).
        scale_local_gradients: see `local`.
        variables: the variable (or source) of each gradient, a list like `grads`, for a hook's
            per-variable state; None where unknown.
        owners: with sharded gradients, the rank that owns each gradient's variable (a list like
            `grads`): each dense gradient is reduced to its owner alone and is None on the other
            ranks, sparse ones reach every rank (`reduction.reduce_to_owners`). None: every rank
            gets every gradient.

    Returns:
        A list like `grads`.
    """
    tfring_op = basics.tfring_op(op, "hvd.DistributedOptimizer")
    if tfring_op == "adasum":
        tfring_op = "mean"  # each rank's own gradient enters; the settings' hook combines them
    if tfring_op not in ("mean", "sum"):
        raise ValueError("hvd.DistributedOptimizer: op currently only supports Average, Sum and Adasum")
    if runtime.rank() not in runtime.process_set_ranks(gradient_settings.process_set):
        return list(grads)
    shared = [k for k in range(len(grads)) if k not in local]
    out = list(grads)
    sources = [variables[k] for k in shared] if variables is not None else None
    if owners is not None:
        reduced = reduction.reduce_to_owners(gradient_settings, [grads[k] for k in shared],
                                             [owners[k] for k in shared], op=tfring_op, variables=sources)
    else:
        reduced = reduction.reduce_gradients(gradient_settings, [grads[k] for k in shared], op=tfring_op,
                                             variables=sources)
    for k, r in zip(shared, reduced):
        out[k] = r
    if scale_local_gradients:
        for k in local:
            out[k] = _divided(grads[k], gradient_settings.size)
    return out


def _divided(grad, size):
    if grad is None:
        return None
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values / tf.cast(size, grad.values.dtype), grad.indices, grad.dense_shape)
    return grad / tf.cast(size, grad.dtype)


def local_layer_weights(local_layers, where):
    """The trainable weights of Horovod's `local_layers` argument (None, a Keras layer or a list of them).

    Raises:
        ValueError: an item is not a Keras layer (Horovod's error).
    """
    layers = [] if local_layers is None else (
        list(local_layers) if isinstance(local_layers, (list, tuple)) else [local_layers])
    if not all(isinstance(layer, keras.layers.Layer) for layer in layers):
        raise ValueError(f"{where}: all local layers must be of keras.layers.Layer type")
    return [w for layer in layers for w in layer.trainable_weights]
