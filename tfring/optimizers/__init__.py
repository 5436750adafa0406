"""Optimizers for large-batch training."""

from tfring.optimizers.lars import LARS

__all__ = ["LARS"]
