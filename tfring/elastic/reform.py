"""Going on in the same process when an elastic job loses ranks (`tfring.elastic.run`).

A rank that lost a peer (a collective failed: the peer's process or host is gone) asks the
launcher for the job's next membership instead of exiting, when the launcher offers it
(`TFRING_REFORM_SECONDS`: `launch.membership`). Given one, it leaves the old ring
(`tfring.runtime.reform`), takes its new rank and size in the model's `RingStrategy`, drops the
model's traced Keras functions, and `run` resumes from the commit the ranks hold in memory: no
process starts, no TensorFlow import, no checkpoint read.

What cannot go on in place does not say it can (`announce`), and exits as before (the launcher
then starts the job again):
a job of one rank before or after (its steps are traced without collectives), an optimizer whose
state is sharded (each rank holds only its slots in memory), gradients reduced over a process set
or through a communication hook with rank-local state. A job that grows still starts again
(the new ranks' start runs collectives, from `RingStrategy()` to building the model, that ranks
already running would not).
"""

import os
import sys

import tensorflow as tf

from tfring import runtime
from tfring.launch import membership
from tfring.launch import variables
from tfring.strategy.sharding import optimizer_state

# The errors of a collective whose peer is gone (its connection closed, or it stopped answering).
LOST_PEER = (tf.errors.UnavailableError, tf.errors.DeadlineExceededError, ConnectionError, TimeoutError)


def offered():
    """The seconds the launcher lets a rank wait for the next membership, or None when it does not
    re-form jobs in place."""
    text = os.environ.get(membership.REFORM_SECONDS)
    try:
        return float(text) if text else None
    except ValueError:
        return None


def _strategy(state):
    model = state.model
    return getattr(model, "distribute_strategy", None) if model is not None else None


def why_not(state):
    """Why `state`'s training cannot go on in this process at another size, or None when it can.

    Args:
        state: a `tfring.elastic.State`.

    Returns:
        A reason (str) or None.
    """
    strategy = _strategy(state)
    if strategy is None or not hasattr(strategy, "_follow_runtime"):
        return "the state has no model under a RingStrategy"
    if strategy.size < 2:
        return "the job ran on one rank (its steps hold no collectives)"
    if state.optimizer is not None and optimizer_state.sharded(state.optimizer):
        return "the optimizer's state is sharded (each rank holds only its own slots)"
    settings = strategy.extended.gradient_settings
    if settings.process_set or not settings.exact:
        return "gradients are reduced over a process set or through a communication hook"
    return None


def announce(state):
    """Tells the launcher, when it offers it, that this rank goes on in place after a failure
    (`launch.membership.CAN_REFORM`; the launcher waits for ranks that lost a peer only when every
    rank said so)."""
    if offered() is not None and why_not(state) is None:
        sys.stderr.write(f"{membership.CAN_REFORM}\n")
        sys.stderr.flush()


def rejoin(state, why):
    """Waits for the launcher's next membership and takes this process's place in it.

    Args:
        state: the `tfring.elastic.State` whose model goes on.
        why: what happened, for the line on stderr ("lost a peer (...)").

    Returns:
        True once this process is a rank of the new membership; False when it must exit instead
        (the launcher does not offer it, the state cannot go on in place, or no membership came).
    """
    seconds = offered()
    if seconds is None:
        return False
    rank = runtime.rank()
    reason = why_not(state)
    if reason is None:
        _say(rank, f"{why}; {membership.REFORM_WAIT}")
        env = runtime.next_membership(seconds)
        reason = _unusable(env, seconds)
    if reason is not None:
        _say(rank, f"{why}; cannot go on in this process: {reason}")
        return False
    took = runtime.reform(env)
    state._in_place = True  # (resume then reads the commit in memory)
    strategy = _strategy(state)
    strategy._follow_runtime()
    _retrace(state.model)
    _say(rank, f"now rank {strategy.rank} of {strategy.size} (rendezvous {took:.2f} s)")
    return True


def _unusable(env, seconds):
    if env is None:
        return f"no new membership from the launcher within {seconds:g} s"
    if env.get(variables.SIZE) == "1":
        return "the job goes on with one rank"
    return None


def _retrace(model):
    """Drops the model's traced Keras functions: the next fit/evaluate/predict traces them for the
    new number of ranks."""
    for name in ("train_function", "test_function", "predict_function"):
        if hasattr(model, name):
            setattr(model, name, None)


def _say(rank, message):
    sys.stderr.write(f"tfring: rank {rank}: {message}\n")
    sys.stderr.flush()

