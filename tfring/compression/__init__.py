"""Gradient compression and the communication-hook seam it plugs into.

How each bucket of dense gradients travels between the ranks is a communication hook, as in
PyTorch DDP's `register_comm_hook(state, hook)`: `RingStrategy(compression=...)`,
`strategy.register_comm_hook(state, hook)` and Horovod's `compression=` all set one, and both
`RingStrategy` and `tfring.horovod` reduce their gradients through it.

The contract:

- A hook is a function `hook(state, bucket) -> Future`. It is called while the train step is
  traced (once per trace, not once per step), in graph mode or eagerly, for every bucket in order;
  every hook call of a step happens before any `Future.wait()`, so a hook must start its
  collectives and return, not wait for them.
- **Only gradients reach a hook**: those entering an optimizer (and Keras' own gradient
  all-reduce). Synchronized batch norm's sums, a step's own `all_reduce`, metrics and
  `strategy.reduce` never do: they stay exact whatever the hook.
- `bucket` is a `GradientBucket`: `bucket.gradients` (this rank's dense gradients in the bucket,
  each shaped and typed like its variable), `bucket.variables` (their variables: the key for
  per-variable state), `bucket.index` (the same on every rank), `bucket.is_last`, `bucket.size`
  (ranks) and `bucket.op`: "mean" for the gradients entering an optimizer (each rank's are of
  the mean loss over its own rows, weighed already when the ranks hold different numbers of rows:
  the job's gradient is their mean, as PyTorch DDP's hooks return), "sum" where they are summed
  (gradient accumulation's weighed sum, Horovod's `op=Sum`). It starts collectives as futures:
  `bucket.allreduce(tensors, op)` (overlapping the backward pass), `allgather`, `alltoall`,
  `reducescatter`, and `bucket.ordered(make)` for a `tf.cond` holding collectives; `flat()` and
  `unflat()` give the bucket as one vector and back. `Future.then(fn)` transforms a result once
  it is there.
- The `Future` must give a list of tensors shaped and typed like `bucket.gradients`: the reduced
  gradients. **Every rank must end with identical bits** (the ranks' weights would drift apart
  otherwise): reduce what travels with collectives only, never mix in a rank's own values after.
- Every rank must start the same collectives in the same order (ranks pass the same hook and
  state).
- `state` is whatever was registered with the hook. A `CommHookState` keeps rank-local variables
  (`state.memory(kind, variable, ...)`: never mirrored, averaged or broadcast, not saved with
  the model) and a step counter (`state.iteration`), advanced after each step's buckets.
- Sparse gradients (`tf.IndexedSlices`) do not pass through hooks: their rows travel as they are.
- A hook other than `allreduce_hook` is taken to be approximate: under a `LossScaleOptimizer` it is
  handed unscaled gradients (the scale comes off before and back after, exactly), so a narrow
  wire type does not overflow where one process would not.

Example:

>>> def halves(state, bucket):            # an exact hook: the ranks' halves reduced, then doubled
...     sent = [g / 2 for g in bucket.gradients]
...     return bucket.allreduce(sent, bucket.op).then(lambda reduced: [r * 2 for r in reduced])
>>> strategy.register_comm_hook(None, halves)
"""

from tfring.compression.adasum import adasum_hook
from tfring.compression.bucket import Future
from tfring.compression.bucket import GradientBucket
from tfring.compression.default_hooks import allreduce_hook
from tfring.compression.default_hooks import cast_hook
from tfring.compression.hook_state import CommHookState
from tfring.compression.onebit import OneBit
from tfring.compression.powersgd import PowerSGD
from tfring.compression.qsgd import QSGD
from tfring.compression.registry import for_compression

__all__ = ["CommHookState", "Future", "GradientBucket", "OneBit", "PowerSGD", "QSGD", "adasum_hook", "allreduce_hook",
           "cast_hook", "for_compression"]
