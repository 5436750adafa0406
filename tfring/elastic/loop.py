"""`tfring.elastic.run`: the decorator that starts a training function from the state to go on from."""

import functools
import sys

from tfring.elastic import state as elastic_state
from tfring.launch import variables
from tfring.ops import collectives


def run(func):
    """Wraps a training function whose first argument is a `tfring.elastic.State`, so that it
    goes on from the newest commit when an elastic job's ranks were started again.

    Before calling `func`, every rank gets the state to start from (`State.resume`): at the
    job's first start rank 0's, after a restart (a failed rank, or hosts added or removed) the
    newest commit any host holds, after which the state's reset callbacks run. When the launcher
    finds more slots, the ranks stop together at their next commit (`HostsUpdatedInterrupt`) and
    exit, and the launcher starts them again on every slot, from that commit. When `func` returns
    on every rank, the hosts' copies of the commits are removed.

    Args:
        func: `func(state, *args, **kwargs)`.

    Returns:
        The wrapped function, which returns what `func` returns.

    Example:

    >>> @tfring.elastic.run
    ... def train(state):
    ...     model.fit(dataset, initial_epoch=state.epoch, epochs=10,
    ...               callbacks=[tfring.elastic.CommitCallback(state)])
    >>> train(tfring.elastic.State(model, epoch=0, batch=0))
    """

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        state.resume()
        try:
            result = func(state, *args, **kwargs)
        except elastic_state.HostsUpdatedInterrupt:  # (on every rank, at one commit)
            sys.exit(variables.LEFT_AT_COMMIT)  # the launcher starts the job again on more slots
        collectives.barrier(label="tfring.elastic.run: every rank finished")  # (before a host's copy goes)
        state.forget()
        return result

    return wrapper
