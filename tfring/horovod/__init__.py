"""Horovod's API on tfring: a Horovod script runs with its import line changed.

    import tfring.horovod.tensorflow.keras as hvd     # was: import horovod.tensorflow.keras as hvd
    import tfring.horovod.tensorflow as hvd           # was: import horovod.tensorflow as hvd
    import tfring.horovod.keras as hvd                # was: import horovod.keras as hvd

and is launched by `tfring run -np 4 python train.py` (horovodrun's place). Horovod's semantics,
not `RingStrategy`'s: every process trains plain Keras on its own batch (the per-rank batch), and
`hvd.DistributedOptimizer` (or `hvd.DistributedGradientTape`) averages the gradients over the
ranks before they are applied. The gradients travel as `RingStrategy`'s do: in buckets, through the
same reduction (`tfring.strategy.gradients.reduction`), identical on every rank.

Differences from Horovod, on purpose:
- `hvd.callbacks.BroadcastGlobalVariablesCallback` broadcasts when training begins (Keras 3 builds
  the optimizer's variables before the first step), not after the first batch, so every rank's
  first step already starts from the root's weights.
- `hvd.broadcast_object` / `hvd.allgather_object` carry JSON values (dicts with string keys,
  lists, strings, numbers, booleans, None), never pickles: nothing another rank or process sends
  is executed. Horovod pickles arbitrary objects; such a value raises a TypeError naming it.
- What tfring does not have yet raises NotImplementedError naming it (Adasum, process sets other
  than the global one, `join`, `alltoall`, `reducescatter`, elastic); nothing is silently ignored.

Gradient conventions: in this package they are Horovod's (an allgather's or a broadcast's gradient
is averaged over the ranks); in `tfring.ops` they are sums. See each function.
"""
