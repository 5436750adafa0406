"""What a multi-rank `RingStrategy` is to the code below it: `RingStrategyBase`, and which models
tfring's Keras wraps act on (`ring_strategy_of`: those of a RingStrategy with more than one rank).

`RingStrategy` derives from `RingStrategyBase`, so the wraps (keras_wraps/) recognise it without
importing it: they sit below it in the strategy package. `while_traced` is how a wrap tells the
strategy's reductions what they are reducing.
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
def while_traced(extended, name, value):
    """Sets the strategy's `extended.<name>` to `value` while the code inside is traced.

    How a wrap tells `RingExtended`'s reductions what they are reducing (an assign_add's delta, the
    optimizer door's frame); the previous value comes back after, so such calls may nest.

    Args:
        extended: a strategy's `extended`.
        name: the attribute, e.g. `"updating_by_delta"`.
        value: its value inside.

    Example:

    >>> with while_traced(variable._distribute_strategy.extended, "updating_by_delta", True):
    ...     variable.assign_add(delta)
    """
    previous = getattr(extended, name)
    setattr(extended, name, value)
    try:
        yield
    finally:
        setattr(extended, name, previous)
