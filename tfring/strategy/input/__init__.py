"""Input under RingStrategy: each rank's share of every global batch.

- `distributed`: the distributed input of a rank's one replica (what
  `experimental_distribute_dataset` and `distribute_datasets_from_function` return);
- `share`: how a dataset is cut for a rank (by file or by record), following `tfring.sharding`;
- `autotuning`: the input pipeline's parallelism for the cores a rank has;
- `digest`: NumPy inputs must be the same arrays on every rank.
"""
