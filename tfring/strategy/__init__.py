"""Distribution: `RingStrategy`, a `tf.distribute` strategy of one replica per process.

Rooms, top down (.importlinter keeps imports pointing down):

- `ring_strategy`, `ring_extended`: the strategy and what it does in each call Keras makes;
- `keras_wraps/`: the Keras functions it wraps, installed once in a stated order;
- `gradients/`: where gradients are all-reduced (the optimizer's door) and how they travel
  (communication hooks, buckets, sparse rows, accumulation, loss reductions);
- `input/`: each rank's share of every global batch;
- the step's parts: `step_rows`, `step_outputs`, `rank_statistics`, `shared_seed`,
  `replica_count_warning`,
  `model_fingerprint`, `inter_op_threads`; below them `rank_agreement`, `strategy_base` and
  `keras_patches` (how a wrap is declared and applied).
"""

__all__ = ["RingStrategy"]


def __getattr__(name):
    # RingStrategy imports TensorFlow: load it when asked for.
    if name == "RingStrategy":
        from tfring.strategy.ring_strategy import RingStrategy

        return RingStrategy
    raise AttributeError(f"module 'tfring.strategy' has no attribute {name!r}")
