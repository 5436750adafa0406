"""Keras callbacks for large-batch training: learning-rate warm-up, step and polynomial decay; and
`StragglerReport`, which says which rank the others wait for.

Each sets the optimizer's rate from Python at batch or epoch boundaries, the same on every rank
(it depends only on the epoch and batch counts), and adds `learning_rate` to the epoch logs. The
rates come from the formulas of `tfring.schedules`, evaluated in epochs; momentum correction goes
through the optimizer's `rescale_momentum(factor)` where it has one (`tfring.optimizers.LARS`).
"""

from tfring.callbacks.learning_rate_warmup import LearningRateWarmup
from tfring.callbacks.multi_step_decay import MultiStepDecay
from tfring.callbacks.polynomial_decay import PolynomialDecay
from tfring.callbacks.straggler_report import StragglerReport

__all__ = ["LearningRateWarmup", "MultiStepDecay", "PolynomialDecay", "StragglerReport"]
