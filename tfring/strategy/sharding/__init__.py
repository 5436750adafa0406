"""Optimizer-state sharding (ZeRO stage 1): `RingStrategy(shard_optimizer_state=True)`.

See `optimizer_state` for how a step runs, `partition` for which rank owns which variable.
"""
