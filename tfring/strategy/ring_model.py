"""Which models tfring's Keras wrappers act on: those of a RingStrategy with more than one rank.

`RingStrategy` derives from `RingStrategyBase`, so the wrappers (checkpointing, reporting,
on_batch) recognise it without importing it: they sit below it in the strategy package.
"""

import contextlib


class RingStrategyBase:
    """What tfring's Keras wrappers know of a `RingStrategy`: this process's rank and the job size.

    Example:

    >>> isinstance(tfring.RingStrategy(), RingStrategyBase)
    True
    """

    rank = 0
    size = 1


def ring_strategy_of(model):
    """The multi-rank `RingStrategy` `model` was built under, or None.

    Args:
        model: a Keras model.

    Returns:
        The strategy, or None when the model belongs to no strategy, to another strategy, or to a
        RingStrategy of one rank (then Keras' own behaviour is already right).

    Example:

    >>> strategy = ring_strategy_of(model)
    >>> strategy.rank if strategy else 0
    """
    strategy = getattr(model, "_distribute_strategy", None)
    if isinstance(strategy, RingStrategyBase) and strategy.size > 1:
        return strategy
    return None


@contextlib.contextmanager
def tracing_flag(extended, name):
    """Sets the strategy's `extended.<name>` to True while the code inside is traced.

    How a wrapper tells `RingExtended`'s reductions what they are reducing (an assign_add's delta,
    gradients already zeroed for a rank without rows); the previous value comes back after.

    Args:
        extended: a strategy's `extended`.
        name: the attribute, e.g. `"updating_by_delta"`.

    Example:

    >>> with tracing_flag(variable._distribute_strategy.extended, "updating_by_delta"):
    ...     variable.assign_add(delta)
    """
    previous = getattr(extended, name, False)
    setattr(extended, name, True)
    try:
        yield
    finally:
        setattr(extended, name, previous)
