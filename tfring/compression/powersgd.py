"""PowerSGD (Vogels et al., 2019): each gradient matrix travels as two thin factors P and Q.

For a gradient reshaped to an n x m matrix M (all dimensions but the last by the last: a Dense
kernel as it is, a convolution's kernel as its inputs by its output channels) and a rank r, one
step of power iteration gives M ~ P Q^T with P n x r and Q m x r, and only P and Q travel:
(n + m) r numbers instead of n m. Both are sums, so they are all-reduced on the ring:

1. M = this rank's gradient + its error-feedback residual;
2. P = M Q (Q from the previous step: warm start), all-reduced, then orthonormalised
   (Gram-Schmidt in float32; a zero column stays zero instead of becoming NaN);
3. Q = M^T P, all-reduced; the job's gradient is approximated by P Q^T, the same on every rank;
4. the residual M - P Q^T, what this rank's gradient lost, is added to its next gradient.

Tensors too small to gain ((n + m) r * min_compression_rate >= n m: biases, vectors, small
kernels) travel exactly, in one allreduce per bucket that starts first. The first `start_iter`
steps are exact for every tensor (PyTorch's `start_powerSGD_iter`): the early gradients change
too fast for a low-rank memory.
"""

import numpy as np
import tensorflow as tf

from tfring import checks
from tfring.compression import hook_state
from tfring.ops import collectives


class PowerSGD:
    """Gradient compression by PowerSGD with error feedback: approximate, opt-in.

    **Not equal to one process**: the gradients the optimizer applies are rank-`rank`
    approximations of the job's gradients (the error feedback carries what each step lost into
    the next). Every rank applies the same approximation, so the ranks' weights stay identical.
    Use it where the allreduce, not the compute, bounds a step (Ethernet between hosts).

    Args:
        rank: the rank r of the approximation (1 to 64): each compressed matrix sends
            (n + m) r numbers.
        start_iter: steps that travel exactly before compression starts (>= 0; >= 2 with
            `warm_start` or `error_feedback`, as in PyTorch).
        min_compression_rate: compress a matrix only if it shrinks at least this many times.
        warm_start: start each step's power iteration from the previous step's Q.
        error_feedback: add what each step's compression lost to the next step's gradient.
        seed: the seed of the first Q (the same on every rank).

    Example:

    >>> strategy = tfring.RingStrategy(compression=tfring.compression.PowerSGD(rank=4))
    >>> opt = hvd.DistributedOptimizer(opt, compression=tfring.compression.PowerSGD(rank=4))
    """

    def __init__(self, rank=4, start_iter=10, min_compression_rate=2.0, warm_start=True, error_feedback=True,
                 seed=0):
        self.rank = checks.number("PowerSGD", "rank", rank, integer=True, at_least=1)
        if self.rank > 64:
            raise ValueError(f"PowerSGD: rank must be at most 64 (a low-rank approximation), got {rank}")
        self.start_iter = checks.number("PowerSGD", "start_iter", start_iter, integer=True, at_least=0)
        if (warm_start or error_feedback) and self.start_iter < 2:
            raise ValueError(f"PowerSGD: start_iter must be >= 2 with warm_start or error_feedback (the first steps "
                             f"build the memories exactly, as PyTorch requires), got {start_iter}")
        self.min_compression_rate = checks.number("PowerSGD", "min_compression_rate", min_compression_rate,
                                                  at_least=1.0)
        self.warm_start = bool(warm_start)
        self.error_feedback = bool(error_feedback)
        self.seed = checks.number("PowerSGD", "seed", seed, integer=True, at_least=0)

    def __repr__(self):
        return (f"PowerSGD(rank={self.rank}, start_iter={self.start_iter}, min_compression_rate="
                f"{self.min_compression_rate}, warm_start={self.warm_start}, error_feedback={self.error_feedback})")

    def new_state(self):
        """A fresh `CommHookState` for this compressor (each strategy or optimizer holds its own)."""
        return hook_state.CommHookState("PowerSGD")

    def matrix(self, shape, dtype):
        """The n x m view of a gradient and its rank, or None when it travels exactly.

        Args:
            shape: the gradient's shape.
            dtype: its dtype.

        Returns:
            `(n, m, r)` or None.

        Example:

        >>> PowerSGD(rank=4).matrix([512, 256], tf.float32)
        (512, 256, 4)
        """
        shape = tf.TensorShape(shape)
        if not tf.as_dtype(dtype).is_floating or shape.rank is None or shape.rank < 2 or not shape.is_fully_defined():
            return None
        m = int(shape[-1])
        n = int(np.prod(shape[:-1]))
        r = min(self.rank, n, m)
        return (n, m, r) if (n + m) * r * self.min_compression_rate < n * m else None

    def __call__(self, state, bucket):
        """The hook: see the module docstring.

        Args:
            state: this compressor's `CommHookState` (`new_state()`).
            bucket: a `GradientBucket`.

        Returns:
            A `Future` of the bucket's approximated gradients.
        """
        grads = bucket.gradients
        plans = [self.matrix(g.shape, g.dtype) for g in grads]
        compressed = [k for k, p in enumerate(plans) if p is not None]
        memories = [self._memories(state, bucket, k, plans[k]) for k in compressed]
        sent = [grads[k] for k in compressed]
        return bucket.compressed_after_warmup(compressed, state.iteration, self.start_iter, lambda: self._compressed(
            bucket, sent, [plans[k] for k in compressed], memories, state.iteration))

    def _memories(self, state, bucket, k, plan):
        """The error residual and the warm-start Q of gradient k (created at the first trace)."""
        n, m, r = plan
        compute = _compute_dtype(bucket.gradients[k].dtype)
        owner, position = bucket.variables[k], (bucket.index, k)
        error = state.memory("error", owner, bucket.gradients[k], lambda s, d: tf.zeros(s, d), shape=[n, m],
                             dtype=compute, position=position) if self.error_feedback else None
        seed = [self.seed, len(state.memories("q"))]  # creation order: the same on every rank
        q = state.memory("q", owner, bucket.gradients[k], lambda s, d: tf.random.stateless_normal(s, seed, dtype=d),
                         shape=[m, r], dtype=compute, position=position) if self.warm_start else None
        return error, q, bucket.index * 4096 + k

    def _compressed(self, bucket, grads, plans, memories, iteration):
        matrices, qs = [], []
        for g, (n, m, r), (error, q, index) in zip(grads, plans, memories):
            matrix = tf.reshape(tf.cast(g, _compute_dtype(g.dtype)), [n, m])
            matrices.append(matrix + error if error is not None else matrix)
            qs.append(q.read_value() if q is not None else tf.random.stateless_normal(
                [m, r], tf.stack([tf.cast(self.seed + index, tf.int64), iteration]), dtype=matrix.dtype))
        ps = collectives.allreduce([tf.matmul(mat, q) for mat, q in zip(matrices, qs)], op=bucket.op,
                                   process_set=bucket.process_set)
        ps = [orthonormal_columns(p) for p in ps]
        qs_reduced = collectives.allreduce([tf.matmul(mat, p, transpose_a=True) for mat, p in zip(matrices, ps)],
                                           op=bucket.op, process_set=bucket.process_set)
        approximations = [tf.matmul(p, q, transpose_b=True) for p, q in zip(ps, qs_reduced)]
        finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(a)) for a in approximations])
        updates = []
        for mat, a, q_new, (error, q, _) in zip(matrices, approximations, qs_reduced, memories):
            # Overflowed steps (a loss scale too high) leave the memories as they were.
            own = a / tf.cast(bucket.size, a.dtype) if bucket.op == "sum" else a
            if error is not None:
                updates.append(error.assign(tf.where(finite, mat - own, error)))
            if q is not None:
                updates.append(q.assign(tf.where(finite, q_new, q)))
        with tf.control_dependencies(updates):
            return [tf.cast(tf.reshape(a, tf.shape(g)), g.dtype) for a, g in zip(approximations, grads)]


def orthonormal_columns(p):
    """`p`'s columns made orthonormal by Gram-Schmidt, in order; a column that is zero (or becomes
    zero: dependent on the earlier ones) stays zero rather than NaN.

    Args:
        p: an n x r matrix.

    Returns:
        An n x r matrix.

    Example:

    >>> orthonormal_columns(tf.constant([[3.0, 1.0], [4.0, 0.0]]))   # [[0.6, 0.8], [0.8, -0.6]]
    """
    columns = []
    for c in tf.unstack(p, axis=1):
        for done in columns:
            c = c - tf.reduce_sum(done * c) * done
        columns.append(tf.math.divide_no_nan(c, tf.norm(c)))
    return tf.stack(columns, axis=1)


def _compute_dtype(dtype):
    return tf.float64 if tf.as_dtype(dtype) == tf.float64 else tf.float32
