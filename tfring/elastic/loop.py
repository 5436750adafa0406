"""`tfring.elastic.run`: the decorator that starts a training function from the state to go on from."""

import functools
import re
import sys

from tfring.elastic import reform
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
    exit, and the launcher starts them again on every slot, from that commit (or, where the
    launcher grows jobs in place, they wait in their processes for the new ranks to join). When `func` returns
    on every rank, the hosts' copies of the commits are removed. Where the launcher offers it
    (`tfring.elastic.reform`), ranks that lose a peer instead go on in their processes: they
    re-form the job without it and call `func` again from the commit they hold in memory.

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
        if not reform.join(state):  # (a rank started into a running job joins it here)
            sys.exit(variables.LEFT_AT_COMMIT)
        while True:
            state.resume()
            reform.announce(state)
            try:
                result = func(state, *args, **kwargs)
                break
            except elastic_state.HostsUpdatedInterrupt:  # (on every rank, at one commit)
                if not (reform.grows_in_place() and reform.rejoin(state, "the hosts changed")):
                    sys.exit(variables.LEFT_AT_COMMIT)  # the launcher starts the job again on more slots
            except reform.LOST_PEER as e:
                if not reform.rejoin(state, f"lost a peer ({_cause(e)})"):
                    raise
        collectives.barrier(label="tfring.elastic.run: every rank finished")  # (before a host's copy goes)
        state.forget()
        return result

    return wrapper


def _cause(error):
    """What the core said was lost ("rank 2 exited or closed its connection"), else the error's first line."""
    text = getattr(error, "message", None) or str(error)
    said = re.search(r"failed on rank \d+: ([^\n\[]+)", text)
    if said:
        return said.group(1).strip()
    return text.strip().splitlines()[0][:200] if text.strip() else type(error).__name__
