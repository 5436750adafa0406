"""`horovod.tensorflow.DistributedOptimizer` of a TF1 optimizer (`tf.compat.v1.train.Optimizer`).

As Horovod's: `compute_gradients` asks the wrapped optimizer for its gradients and reduces them
over the ranks (or the process set) through the door `hvd.DistributedOptimizer` and
`hvd.DistributedGradientTape` use (`gradients.reduce`: buckets, sparse rows, compression and the
predivide factor); `apply_gradients` and the rest are the wrapped optimizer's. A rank outside the
process set keeps its own gradients. TF1 graphs only (a `Session`), where such optimizers live.
"""

import tensorflow as tf

from tfring.horovod import basics
from tfring.horovod import compression as compression_lib
from tfring.horovod import gradients
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

    Raises:
        ValueError: `op` other than Average or Sum, a predivide factor with Sum, or an unregistered
            `process_set`.

    Example:

    >>> opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1))
    >>> train_op = opt.minimize(loss)
    """

    def __init__(self, optimizer, name=None, use_locking=False, compression=compression_lib.Compression.none,
                 sparse_as_dense=False, op=basics.Average, gradient_predivide_factor=1.0,
                 process_set=process_sets.global_process_set):
        super().__init__(name=name or f"Distributed{type(optimizer).__name__}", use_locking=use_locking)
        self._optimizer = optimizer
        self._op = op
        where = "hvd.DistributedOptimizer"
        self._settings = gradients.settings(compression, sparse_as_dense, gradient_predivide_factor, where,
                                            process_sets.set_id(process_set, where))

    def compute_gradients(self, *args, **kwargs):
        """The wrapped optimizer's (gradient, variable) pairs, the gradients reduced over the ranks."""
        pairs = self._optimizer.compute_gradients(*args, **kwargs)
        if not pairs:
            return pairs
        grads, variables = zip(*pairs)
        return list(zip(gradients.reduce(self._settings, list(grads), self._op, variables=list(variables)), variables))

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
