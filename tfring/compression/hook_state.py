"""`CommHookState`: what a communication hook keeps between steps, on each rank for itself."""

import tensorflow as tf

from tfring.compression import hosts


class CommHookState:
    """A hook's memory: rank-local variables (error-feedback residuals, warm-start factors) keyed by
    the bucket's variables, and a step counter.

    Its variables are created with `synchronization=NONE`: under `RingStrategy` they are never
    mirrored, averaged or broadcast (each rank keeps its own values: an error-feedback residual is
    what this rank's gradients lost), and Keras does not track them. They are not saved with the
    model: a job resumed from a checkpoint (`BackupAndRestore`, `ModelCheckpoint`) starts them
    afresh, as DeepSpeed resets its compression errors at a checkpoint load: the residuals start
    from zero and the counter from 0 (so a warm-up of `start_iter` exact steps runs again).

    Args:
        owner: what the state belongs to, named in its variables and in errors (e.g. "PowerSGD").

    Example:

    >>> state = CommHookState("my_hook")
    >>> residual = state.memory("error", bucket.variables[0], bucket.gradients[0], tf.zeros_initializer())
    """

    def __init__(self, owner="hook"):
        self.owner = owner
        self._memories = {}  # (kind, key) -> (the key object, kept alive so its id stays unique, variable)
        self._iteration = None
        self._host_sets = ()  # not looked up yet

    def host_sets(self):
        """The job's hosts as process sets (`hosts.HostSets`), looked up by every rank at its first
        call (the first trace of a hook that asks) and kept; None for a job that is not several
        hosts of several ranks each.

        Example:

        >>> sets = state.host_sets()
        >>> if sets: bucket.reducescatter(...)   # inside the host, then compress across hosts
        """
        if self._host_sets == ():
            self._host_sets = hosts.host_sets()
        return self._host_sets

    @property
    def iteration(self):
        """The steps whose gradients went through the hook so far (an int64 variable, the same on
        every rank; the runner advances it after each step's buckets)."""
        if self._iteration is None:
            self._iteration = self._variable(lambda: tf.zeros([], tf.int64), f"{self.owner}_iteration")
        return self._iteration

    def memory(self, kind, variable, like, initializer, shape=None, dtype=None, position=None):
        """This rank's variable `kind` for the gradient of `variable`, created on first use.

        Args:
            kind: what it holds, e.g. "error" or "q".
            variable: the model variable it belongs to (`bucket.variables[k]`), or a list of them
                (a memory of a whole bucket); None, or a list holding a None, keys it by
                `position` (a bucket index and place, which changes when buckets are re-cut).
            like: the gradient it goes with (for its name, shape and dtype defaults).
            initializer: a function `(shape, dtype) -> tensor` for its first value.
            shape: its shape (default: `like`'s).
            dtype: its dtype (default: `like`'s).
            position: `(bucket index, place in the bucket)`, the key when `variable` is None.

        Returns:
            A `tf.Variable`, local to this rank.

        Raises:
            ValueError: neither `variable` nor `position` given, or a memory of that key exists
                with another shape or dtype.

        Example:

        >>> error = state.memory("error", bucket.variables[0], bucket.gradients[0], tf.zeros)
        """
        several = isinstance(variable, (list, tuple))  # a memory of a whole bucket
        if several and any(v is None for v in variable):
            variable = None  # one unknown variable: the list is no stable key
        if variable is None and position is None:
            raise ValueError(f"{self.owner}: a memory needs the gradient's variable or its position in the bucket")
        if variable is None:
            key, name = (kind, "position", tuple(position)), f"bucket{position}"
        elif several:
            key, name = (kind, tuple(id(v) for v in variable)), f"bucket{position}"
        else:
            key, name = (kind, id(variable)), getattr(variable, "path", None) or getattr(variable, "name", "")
        shape = tf.TensorShape(like.shape if shape is None else shape)
        dtype = tf.as_dtype(like.dtype if dtype is None else dtype)
        if key not in self._memories:
            self._memories[key] = (variable, self._variable(lambda: initializer(shape, dtype),
                                                            f"{self.owner}_{kind}_{name}"))
        memory = self._memories[key][1]
        if memory.shape != shape or memory.dtype != dtype:
            raise ValueError(f"{self.owner}: the {kind} memory of {key[1:]} is {memory.dtype.name} "
                             f"{memory.shape}, but the gradient now needs {dtype.name} {shape}")
        return memory

    def memories(self, kind=None):
        """This rank's memory variables (of one `kind`, or all).

        Returns:
            A list of `tf.Variable`s, in creation order.

        Example:

        >>> [e.numpy() for e in state.memories("error")]   # this rank's residuals
        """
        return [v for (k, *_), (_, v) in self._memories.items() if kind is None or k == kind]

    def advance(self, after):
        """Counts one step, after the tensors `after` exist (the step's reduced gradients).

        Args:
            after: a list of tensors.

        Returns:
            The increment op's result.

        Example:

        >>> state.advance(reduced)   # the runner does this after each step's buckets
        """
        with tf.control_dependencies([t for t in after if t is not None]):
            return self.iteration.assign_add(1)

    def _variable(self, initial, name):
        # Outside any traced step (created once, at the first trace) and never synchronized.
        with tf.init_scope():
            value = initial() if callable(initial) else initial
            return tf.Variable(value, trainable=False, name=_safe(name),
                               synchronization=tf.VariableSynchronization.NONE,
                               aggregation=tf.VariableAggregation.NONE)


def _safe(name):
    return "".join(c if c.isalnum() or c in "_." else "_" for c in str(name))
