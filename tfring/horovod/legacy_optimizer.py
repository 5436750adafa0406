"""`horovod.tensorflow.DistributedOptimizer` of a TF1 optimizer (`tf.compat.v1.train.Optimizer`).

As Horovod's: `compute_gradients` asks the wrapped optimizer for its gradients and reduces them
over the ranks (or the process set) with `hvd.grouped_allreduce`; `apply_gradients` and the rest
are the wrapped optimizer's. A rank outside the process set keeps its own gradients. TF1 graphs
only (a `Session`), where such optimizers live.
"""

import tensorflow as tf

from tfring.horovod import basics
from tfring.horovod import collectives
from tfring.horovod import process_sets


class LegacyDistributedOptimizer(tf.compat.v1.train.Optimizer):
    """A TF1 optimizer whose `compute_gradients` averages (or sums) over the ranks.

    Args:
        optimizer: a `tf.compat.v1.train.Optimizer`.
        name: the optimizer's name (default "Distributed" + the wrapped class's name).
        use_locking: passed to `tf.compat.v1.train.Optimizer`.
        compression: `hvd.Compression.none` or `.fp16`.
        sparse_as_dense: densify `tf.IndexedSlices` gradients before they travel.
        op: `hvd.Average` or `hvd.Sum`.
        gradient_predivide_factor: each rank sends g / f; the sum is multiplied by f / size.
        process_set: the `hvd.ProcessSet` to reduce over.

    Example:

    >>> opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1))
    >>> train_op = opt.minimize(loss)
    """

    def __init__(self, optimizer, name=None, use_locking=False, compression=None, sparse_as_dense=False,
                 op=basics.Average, gradient_predivide_factor=1.0, process_set=process_sets.global_process_set):
        super().__init__(name=name or f"Distributed{type(optimizer).__name__}", use_locking=use_locking)
        self._optimizer = optimizer
        self._compression = compression
        self._sparse_as_dense = bool(sparse_as_dense)
        self._op = op
        self._predivide = float(gradient_predivide_factor)
        self._process_set = process_set
        process_sets.set_id(process_set, "hvd.DistributedOptimizer")

    def compute_gradients(self, *args, **kwargs):
        """The wrapped optimizer's (gradient, variable) pairs, the gradients reduced over the ranks."""
        pairs = self._optimizer.compute_gradients(*args, **kwargs)
        if not self._process_set.included() or not pairs:
            return pairs
        grads, variables = zip(*pairs)
        return list(zip(self._reduced(list(grads)), variables))

    def _reduced(self, grads):
        present = [k for k, g in enumerate(grads) if g is not None]
        sent = [grads[k] for k in present]
        if self._sparse_as_dense:
            sent = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in sent]
        op, pre, post = self._op, 1.0, 1.0
        if self._predivide != 1.0 and op == basics.Average:
            op, pre, post = basics.Sum, 1.0 / self._predivide, self._predivide / self._process_set.size()
        kwargs = {} if self._compression is None else {"compression": self._compression}
        reduced = collectives.grouped_allreduce(sent, op=op, prescale_factor=pre, postscale_factor=post,
                                                process_set=self._process_set, **kwargs)
        out = list(grads)
        for k, r in zip(present, reduced):
            out[k] = r
        return out

    def apply_gradients(self, *args, **kwargs):
        """The wrapped optimizer's `apply_gradients`."""
        return self._optimizer.apply_gradients(*args, **kwargs)

    def get_slot(self, *args, **kwargs):
        """The wrapped optimizer's `get_slot`."""
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        """The wrapped optimizer's `get_slot_names`."""
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        """The wrapped optimizer's variables."""
        return self._optimizer.variables(*args, **kwargs)
