"""What a multi-rank `RingStrategy` is to the code below it: `RingStrategyBase`, and which models
tfring's Keras wraps act on (`ring_strategy_of`: those of a RingStrategy with more than one rank).

`RingStrategy` derives from `RingStrategyBase`, so the wraps (keras_wraps/) recognise it without
importing it: they sit below it in the strategy package.
"""

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
