"""The Keras functions RingStrategy wraps where Keras 3 has no hook for a multi-process strategy.

`install.install_all()` wraps them all, once, in a stated order (`RingStrategy()` calls it). Each
wrap is declared as a `keras_patches.Patch` in a `PATCHES` list beside the code that needs it:

- `model_calls`: one wrap of each of `fit`, `evaluate`, `predict` (the ranks agree on the model
  and the NumPy inputs, ranks > 0 report nothing, a model outside the scope is refused);
- `checkpointing` (with `partial_files`, `save_sinks`): saves run on every rank, rank 0 writes;
- `on_batch`: `train_on_batch`, `test_on_batch`, `predict_on_batch`;
- `rank_noise`: Keras' seeded noise is independent between ranks;
- `reporting`, `scope_check`: what `model_calls` does for quiet ranks and a model outside the scope.

Wraps of the gradient path (`gradients.door`, `gradients.loss_reductions`) and of loss scaling
(`step_rows`) live beside their code, and `install_all()` applies them too.
"""
