"""Going on in the same process when an elastic job loses ranks (`tfring.elastic.run`).

A rank that lost a peer (a collective failed: the peer's process or host is gone) asks the
launcher for the job's next membership instead of exiting, when the launcher offers it
(`TFRING_REFORM_SECONDS`: `launch.membership`). Given one, it leaves the old ring
(`tfring.runtime.reform`), takes its new rank and size in the model's `RingStrategy`, drops the
model's traced Keras functions, and `run` resumes from the commit the ranks hold in memory: no
process starts, no TensorFlow import, no checkpoint read.

A job grows the same way where the launcher offers it (`TFRING_GROWS_IN_PLACE`): its ranks stop
at a commit (`HostsUpdatedInterrupt`) and wait for the next membership, and the launcher starts the
new slots' ranks as joining ranks (`TFRING_JOINING`): such a rank runs alone until it reaches
`run` (its start's collectives, from `RingStrategy()` to building the model, answer with its own
values, which the commit then replaces), then joins (`join`) and takes the commit from the ranks
that hold it. As it joins, every rank compares the global random state it took at its start
(`shared_seed.state_digest`): a joining rank cannot take the job's, so a script that leaves NumPy's
or Python's generator unseeded fails there, saying so, rather than feed ranks different data.

What cannot go on in place does not say it can (`announce`), and exits as before (the launcher
then starts the job again):
a job of one rank before or after (its steps are traced without collectives), an optimizer whose
state is sharded (each rank holds only its slots in memory), gradients reduced over a process set
or through a communication hook with rank-local state.
"""

import os
import sys

import tensorflow as tf

from tfring import runtime
from tfring.launch import membership
from tfring.launch import variables
from tfring.strategy import rank_agreement
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


def grows_in_place():
    """Whether the launcher lets ranks that stop for a growth (`HostsUpdatedInterrupt`) wait for
    the next membership in their processes, instead of exiting to be started again."""
    return os.environ.get(membership.GROWS_IN_PLACE) == "1" and offered() is not None


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
        sys.stderr.write(membership.can_reform_line(_strategy(state).random_state_digest) + "\n")
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
    state._in_place = True  # (resume then reads the commit in memory)
    _enter(state, env)
    return True


def join(state):
    """Where this process was started into a running elastic job (`runtime.joining()`), waits for
    the launcher's membership and joins it; `run` then gives it the job's commit.

    Args:
        state: the `tfring.elastic.State` whose model joins.

    Returns:
        False when it cannot join in its process because its random state is not the job's (the
        caller exits: the launcher starts the job again on every slot); else True.

    Raises:
        RuntimeError: the state cannot go on in place, or no membership came in time.
    """
    if not runtime.joining():
        return True
    seconds, rank = offered(), runtime.rank()
    reason = why_not(state) or ("the launcher offers no time to wait for it" if seconds is None else None)
    said = os.environ.get(membership.RANDOM_STATE)
    if reason is None and said and said != f"{_strategy(state).random_state_digest:x}":
        _say(rank, "cannot join the running job in this process: the random state it took at its start (NumPy's, "
                   "Python's, TensorFlow's seed) is not the job's; seed them on every rank before RingStrategy() "
                   "(keras.utils.set_random_seed) for jobs to grow in their processes")
        return False
    if reason is None:
        _say(rank, f"started to join the running job; {membership.REFORM_WAIT}")
        env = runtime.next_membership(seconds)
        reason = _unusable(env, seconds)
    if reason is not None:
        raise RuntimeError(f"tfring.elastic: rank {rank} was started to join a running job but cannot: {reason}")
    _enter(state, env)
    return True


def _enter(state, env):
    """Meets the membership `env`, takes this process's place in it, and checks the ranks' random state."""
    rank = runtime.rank()  # (the old one, which the line names it by)
    took = runtime.reform(env)
    strategy = _strategy(state)
    strategy._follow_runtime()
    _retrace(state.model)
    _same_random_state(strategy)
    _say(rank, f"now rank {strategy.rank} of {strategy.size} (rendezvous {took:.2f} s)")


def _same_random_state(strategy):
    """Raises RuntimeError on every rank unless all took the same global random state at their start."""
    found = rank_agreement.differences(["random state"], [strategy.random_state_digest])
    if found is not None:
        differ, _ = found
        raise RuntimeError(
            f"tfring.elastic: the ranks' global random state (NumPy's, Python's, TensorFlow's seed) differs: ranks "
            f"{differ} took another than rank 0 at their start. A rank that joins a running job keeps its own, so "
            f"the script must seed them alike on every rank before RingStrategy() (keras.utils.set_random_seed) "
            f"for the job to grow in its processes")


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

