"""What a communication hook receives (`GradientBucket`) and returns (`Future`)."""

import dataclasses

import tensorflow as tf

from tfring.ops import collectives
from tfring.ops import ordering
from tfring.ops import started


class Future(started.Pending):
    """The result of a hook's collectives, available once the step has started them all: a
    `tfring.ops` `Pending` (its `wait()` gives the list of tensors, computed once) with `then`.

    Args:
        wait: a function of no arguments returning a list of tensors (called at most once).

    Example:

    >>> future = bucket.allreduce(bucket.gradients)
    >>> future.then(lambda reduced: [r / 2 for r in reduced]).wait()
    """

    def then(self, fn):
        """A future of `fn(result)`.

        Args:
            fn: a function from this future's list of tensors to another list of tensors.

        Returns:
            A `Future`.

        Example:

        >>> bucket.allreduce(sent).then(lambda reduced: [r * 2 for r in reduced])
        """
        return Future(lambda: fn(self.wait()))

    @staticmethod
    def done(tensors):
        """A future whose result is there already.

        Args:
            tensors: a list of tensors.

        Returns:
            A `Future`.

        Example:

        >>> Future.done(bucket.gradients).wait()   # a hook that sends nothing (one rank)
        """
        tensors = list(tensors)
        return Future(lambda: tensors)


@dataclasses.dataclass
class GradientBucket:
    """One bucket of a step's dense gradients, as a communication hook receives it.

    Args:
        index: the bucket's position among the step's buckets (the same on every rank; it may
            change when the step is traced again with another `bucket_bytes`).
        gradients: this rank's gradients in the bucket, a list of dense tensors.
        variables: the variable of each gradient (None where the caller named none): the stable
            key for a hook's per-variable state (`CommHookState.memory`).
        op: the reduction asked for: "mean" (the gradients entering an optimizer) or "sum".
        is_last: whether this is the step's last bucket.
        overlap: start collectives so that they overlap the rest of the step (several buckets in
            a graph); otherwise each is one op.
        process_set: the tfring process set the collectives run over (0: every rank).
        size: the number of ranks in it.

    Example:

    >>> bucket.allreduce(bucket.gradients, bucket.op).wait()
    """

    index: int
    gradients: list
    variables: list = None
    op: str = "sum"
    is_last: bool = True
    overlap: bool = False
    process_set: int = 0
    size: int = 1

    def __post_init__(self):
        if self.variables is None:
            self.variables = [None] * len(self.gradients)

    def allreduce(self, tensors, op=None):
        """Starts all-reducing `tensors` (one fused collective per dtype).

        Args:
            tensors: a list of tensors.
            op: "sum", "mean", "min", "max" or "product"; default: the bucket's `op`.

        Returns:
            A `Future` of the reduced tensors, identical on every rank.

        Example:

        >>> bucket.allreduce([tf.cast(g, tf.bfloat16) for g in bucket.gradients])
        """
        op = op or self.op
        if self.overlap:
            return Future(started.allreduce_start(tensors, op=op, process_set=self.process_set).wait)
        return Future.done(collectives.allreduce(list(tensors), op=op, process_set=self.process_set))

    def allgather(self, tensor):
        """Starts concatenating every rank's `tensor` along its first dimension, in rank order;
        every rank sends as many rows.

        Args:
            tensor: a tensor of rank >= 1, of the same shape on every rank.

        Returns:
            A `Future` of a one-tensor list.

        Example:

        >>> bucket.allgather(tf.reshape(norm, [1])).wait()[0]   # every rank's norm, in rank order
        """
        return Future(started.allgather_start(tensor, process_set=self.process_set).wait)

    def alltoall(self, tensor):
        """Starts sending the k-th of `size` equal row blocks of `tensor` to rank k; each rank
        receives its block from every rank, in rank order.

        Args:
            tensor: a tensor whose first dimension divides by `size`.

        Returns:
            A `Future` of a one-tensor list, shaped like `tensor`.

        Example:

        >>> bucket.alltoall(tf.reshape(packed, [bucket.size, -1])).wait()[0]
        """
        return Future(started.alltoall_start(tensor, process_set=self.process_set).wait)

    def reducescatter(self, tensors, op=None):
        """Starts reducing `tensors` over the ranks; each rank gets its share of every tensor's
        rows (`tfring.ops.reducescatter`'s split).

        Args:
            tensors: a list of tensors of rank >= 1.
            op: as for `allreduce`.

        Returns:
            A `Future` of this rank's rows of each reduced tensor.

        Example:

        >>> my_rows = bucket.reducescatter([bucket.flat()]).wait()[0]
        """
        return Future(started.reducescatter_start(list(tensors), op=op or self.op, process_set=self.process_set).wait)

    def ordered(self, make):
        """Builds `make()` (a composite holding collectives: a `tf.cond` with some in each branch)
        as one link of the ranks' collective order (`tfring.ops.ordering`).

        Args:
            make: a function returning a list of tensors.

        Returns:
            A `Future` of `make()`'s tensors.

        Example:

        >>> bucket.ordered(lambda: tf.cond(state.iteration < 10, exact, compressed))
        """
        return Future.done(ordering.ordered(make))

    def compressed_after_warmup(self, positions, iteration, warmup_steps, compress):
        """The usual shape of a compressor: the gradients at `positions` travel exactly for the first
        `warmup_steps` steps and through `compress()` after; the others exactly, in one allreduce
        that starts first. Warm-up and compression are one `tf.cond` (`ordered`): every rank takes
        the same branch, since every rank counts the same steps.

        Args:
            positions: the places in `gradients` to compress.
            iteration: the step counter (`CommHookState.iteration`).
            warmup_steps: exact steps before compression starts.
            compress: a function of no arguments returning the reduced gradients at `positions`,
                shaped and typed like them.

        Returns:
            A `Future` of every gradient of the bucket, reduced.

        Example:

        >>> bucket.compressed_after_warmup([0], state.iteration, 10, lambda: my_compressed(bucket))
        """
        grads = self.gradients
        others = [k for k in range(len(grads)) if k not in positions]
        exact = self.allreduce([grads[k] for k in others]) if others else Future.done([])
        if not positions:
            return exact
        sent = [grads[k] for k in positions]

        def warm_up():
            return collectives.allreduce(sent, op=self.op, process_set=self.process_set)

        approximated = self.ordered(lambda: tf.cond(iteration < warmup_steps, warm_up, compress))

        def together():
            out = [None] * len(grads)
            for k, r in zip(others, exact.wait()):
                out[k] = r
            for k, r in zip(positions, approximated.wait()):
                out[k] = r
            return out

        return Future(together)

    def flat(self, tensors=None):
        """The bucket's gradients (or `tensors` shaped like them) as one vector.

        Args:
            tensors: a list shaped like `gradients`, of one dtype; default the gradients.

        Returns:
            A 1-D tensor.

        Example:

        >>> bucket.flat()   # one vector of every gradient in the bucket
        """
        tensors = self.gradients if tensors is None else tensors
        return tf.concat([tf.reshape(t, [-1]) for t in tensors], axis=0)

    def unflat(self, vector):
        """`vector` (as `flat` made it) cut back into tensors shaped like the gradients.

        Args:
            vector: a 1-D tensor.

        Returns:
            A list of tensors.

        Example:

        >>> bucket.unflat(bucket.flat() * 2)   # the gradients, doubled, in their shapes
        """
        sizes = [tf.size(g) for g in self.gradients]
        return [tf.reshape(part, tf.shape(g)) for part, g in zip(tf.split(vector, sizes), self.gradients)]
