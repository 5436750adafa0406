"""Gradients under RingStrategy: where they are all-reduced and how they travel.

- `door`: gradients are all-reduced as they enter the optimizer (`Optimizer.apply`,
  `LossScaleOptimizer.apply`), so clipping and the loss scale's finiteness check see the job's
  gradients, and Keras' own all-reduce later passes them through;
- `reduction`: a list of gradients summed over the ranks: dense ones in `buckets`, each through the
  communication hook (`tfring.compression`), sparse ones as rows (`sparse`);
- `buckets` and `bucket_tuning`: which gradients travel together, and `bucket_bytes="auto"`;
- `accumulation`: Keras' gradient accumulation, reduced once per applied step.
"""
