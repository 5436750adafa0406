"""Learning-rate scaling rules for larger global batches (Goyal et al. 2017; Hoffer et al. 2017)."""

import math

from tfring import checks

_RULES = ("linear", "sqrt")


def scale_learning_rate(base_lr, global_batch_size, base_batch_size=256, rule="linear"):
    """The learning rate for `global_batch_size`, given one tuned for `base_batch_size`.

    Linear rule (Goyal et al.): lr = base_lr · global / base. Square-root rule (Hoffer et al.):
    lr = base_lr · √(global / base).

    Args:
        base_lr: the learning rate tuned for `base_batch_size`, > 0.
        global_batch_size: the batch summed over all ranks, > 0.
        base_batch_size: the batch `base_lr` was tuned for, > 0. Defaults to 256.
        rule: "linear" or "sqrt".

    Returns:
        The scaled learning rate (a float).

    Raises:
        ValueError: a non-positive argument or an unknown rule.

    Example:

    >>> scale_learning_rate(0.1, global_batch_size=8192)
    3.2
    >>> scale_learning_rate(0.1, global_batch_size=1024, rule="sqrt")
    0.2
    """
    for what, value in (("base_lr", base_lr), ("global_batch_size", global_batch_size),
                        ("base_batch_size", base_batch_size)):
        checks.number("scale_learning_rate", what, value, above=0, expected="a positive number")
    checks.choice("scale_learning_rate", "rule", rule, _RULES)
    ratio = global_batch_size / base_batch_size
    return float(base_lr * (ratio if rule == "linear" else math.sqrt(ratio)))
