"""`tfring.elastic`: training that goes on from its last commit when an elastic job's ranks change.

Under `tfring run --min-np A --max-np B`, a script that keeps its state in a `State`, commits it
(`CommitCallback` in `fit`, `state.commit()` in a custom loop) and trains inside a function wrapped
by `run` goes on after a failed rank or a lost host: the ranks left keep their processes and go on
from the commit they hold in memory (`reform`); where they cannot, every rank starts again and goes
on from the newest commit, which every host keeps. Either way losing any host, rank 0's included,
loses at most the work since that commit; new slots join at the next commit (every rank starts
again then), losing nothing. With `RingStrategy`, whose global batch does not
depend on the number of ranks, the job then computes exactly the steps of the uninterrupted run.

Example:

>>> state = tfring.elastic.State(model, epoch=0, batch=0)
>>> @tfring.elastic.run
... def train(state):
...     model.fit(dataset, initial_epoch=state.epoch, epochs=10,
...               callbacks=[tfring.elastic.CommitCallback(state, save_freq=100)])
>>> train(state)
"""

from tfring.elastic.callbacks import CommitCallback
from tfring.elastic.loop import run
from tfring.elastic.state import HostsUpdatedInterrupt
from tfring.elastic.state import State

__all__ = ["State", "CommitCallback", "run", "HostsUpdatedInterrupt"]
