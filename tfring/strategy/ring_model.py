"""Which models tfring's Keras wrappers act on: those of a RingStrategy with more than one rank."""


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
    from tfring.strategy.ring_strategy import RingStrategy

    strategy = getattr(model, "_distribute_strategy", None)
    if isinstance(strategy, RingStrategy) and strategy.size > 1:
        return strategy
    return None
