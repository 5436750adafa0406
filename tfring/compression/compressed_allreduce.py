"""The compressed allreduce in two legs (DeepSpeed's, Tang et al., 2021), for codecs whose values
cannot be summed on a ring without decoding and encoding again at every hop (signs, 8-bit levels):

1. worker: x = this rank's gradients (one flat float32 vector, padded to whole bytes per rank)
   + its worker error; x is cut into one chunk per rank and each chunk encoded; the worker error
   keeps x minus what was sent;
2. all-to-all: chunk j goes to rank j, which decodes and averages what every rank sent it, adds its
   server error, and encodes that again (the server error keeps what this loses);
3. allgather: every rank receives every chunk and decodes the same vector.

A codec encodes a chunk with a scale for each segment (a tensor's part of it, or the padding), so
layers whose gradients differ in size by orders of magnitude keep their own.

On a job of several hosts with several ranks each, the ranks of a host first reduce the bucket
exactly among themselves (a reduce-scatter over shared memory: each holds the host's sum of one
part), the parts go through the two legs between the hosts (each rank with its peers of the same
local rank), and an allgather inside the host puts them together: only encoded bytes cross
between hosts, as on a job of one rank per host.
"""

import numpy as np
import tensorflow as tf

from tfring import checks
from tfring import runtime
from tfring.compression import hook_state
from tfring.ops import collectives


class TwoLegCompressor:
    """What `OneBit` and `QSGD` share: floating gradients through the two legs after `warmup_steps`
    exact steps (hierarchically where `hierarchical` and the job's layout allow), the others
    exactly. A subclass names itself (`name`), says whether it keeps worker and server errors
    (`error_feedback`) and is its own codec: `encode(chunks, lengths, seed) -> (scales, payload)`
    and `decode(scales, payload, lengths) -> float32 chunks`.

    Args:
        warmup_steps: steps that travel exactly before compression starts.
        hierarchical: on a job of several hosts with several ranks each, reduce exactly inside
            each host and compress only between hosts.

    Example:

    >>> class Halves(TwoLegCompressor):   # a codec of float16 values, no scales
    ...     name = "Halves"
    ...     encode = staticmethod(lambda chunks, lengths, seed: (tf.zeros(lengths.shape), tf.cast(chunks, tf.float16)))
    ...     decode = staticmethod(lambda scales, payload, lengths: tf.cast(payload, tf.float32))
    """

    name = "compressor"
    error_feedback = False

    def __init__(self, warmup_steps, hierarchical):
        self.warmup_steps = checks.number(self.name, "warmup_steps", warmup_steps, integer=True, at_least=0)
        self.hierarchical = bool(hierarchical)

    def __repr__(self):
        return f"{self.name}(warmup_steps={self.warmup_steps}, hierarchical={self.hierarchical})"

    def new_state(self):
        """A fresh `CommHookState` for this compressor (each strategy or optimizer holds its own)."""
        return hook_state.CommHookState(self.name)

    def __call__(self, state, bucket):
        """The hook: see the module docstring.

        Args:
            state: this compressor's `CommHookState` (`new_state()`).
            bucket: a `GradientBucket`.

        Returns:
            A `Future` of the bucket's approximated gradients.
        """
        floating = [k for k, g in enumerate(bucket.gradients) if g.dtype.is_floating]
        if not floating:
            return bucket.allreduce(bucket.gradients)
        hosts = None
        if self.hierarchical and bucket.process_set == 0 and bucket.size > 1:
            hosts = state.host_sets()
        how = _Hierarchical(state, bucket, floating, self, hosts) if hosts else _Flat(state, bucket, floating, self)
        return bucket.compressed_after_warmup(floating, state.iteration, self.warmup_steps, how)


class _Flat:
    """The two legs over the bucket's ranks; worker errors kept per gradient."""

    def __init__(self, state, bucket, floating, codec):
        self.bucket, self.codec, self.state = bucket, codec, state
        self.grads = [bucket.gradients[k] for k in floating]
        self.layout = Layout([g.shape.num_elements() for g in self.grads], parts=1, chunks=bucket.size)
        self.errors, self.server = [], None
        if codec.error_feedback:
            self.errors = [state.memory("worker_error", bucket.variables[k], bucket.gradients[k], tf.zeros,
                                        dtype=tf.float32, position=(bucket.index, k)) for k in floating]
            self.server = state.memory("server_error", [bucket.variables[k] for k in floating], self.grads[0], tf.zeros,
                                       shape=[self.layout.chunk], dtype=tf.float32, position=(bucket.index, "server"))

    def __call__(self):
        bucket, layout = self.bucket, self.layout
        x = layout.padded(_flat(self.grads, self.errors))
        mean, residual, updates = compressed_mean(
            x, layout.lengths(0), self.codec, bucket.process_set, collectives.position("compression", bucket.process_set),
            _seed(self.state, bucket), self.server)
        scale = float(bucket.size) if bucket.op == "sum" else 1.0
        if self.errors:
            parts = tf.split(residual[:layout.length], [e.shape.num_elements() for e in self.errors])
            updates += [e.assign(tf.reshape(part, e.shape)) for e, part in zip(self.errors, parts)]
        return _shaped_like(mean[:layout.length] * scale, self.grads, updates)


class _Hierarchical:
    """An exact reduce-scatter inside the host, the two legs of this rank's part between the hosts,
    and an allgather inside the host; the worker error is kept per part."""

    def __init__(self, state, bucket, floating, codec, hosts):
        self.bucket, self.codec, self.state, self.hosts = bucket, codec, state, hosts
        self.grads = [bucket.gradients[k] for k in floating]
        owners = [bucket.variables[k] for k in floating]
        self.layout = Layout([g.shape.num_elements() for g in self.grads], parts=hosts.local_size, chunks=hosts.hosts)
        self.error = self.server = None
        if codec.error_feedback:
            self.error = state.memory("worker_error", owners, self.grads[0], tf.zeros, shape=[self.layout.part],
                                      dtype=tf.float32, position=(bucket.index, "part"))
            self.server = state.memory("server_error", owners, self.grads[0], tf.zeros, shape=[self.layout.chunk],
                                       dtype=tf.float32, position=(bucket.index, "server"))

    def __call__(self):
        bucket, hosts, layout = self.bucket, self.hosts, self.layout
        rows = tf.reshape(layout.padded(_flat(self.grads)), [hosts.local_size, layout.part])
        host_sum = collectives.reducescatter(rows, op="sum", process_set=hosts.local)[0]
        x = host_sum if self.error is None else host_sum + self.error
        mean, residual, updates = compressed_mean(x, layout.lengths(hosts.local_rank), self.codec, hosts.cross,
                                                  hosts.host, _seed(self.state, bucket), self.server)
        everything = tf.reshape(collectives.allgather(mean[None, :], process_set=hosts.local), [-1])
        # `mean` is the mean over hosts of each host's sum.
        scale = float(hosts.hosts) if bucket.op == "sum" else 1.0 / hosts.local_size
        if self.error is not None:
            updates.append(self.error.assign(residual))
        return _shaped_like(everything[:layout.length] * scale, self.grads, updates)


def compressed_mean(x, lengths, codec, process_set, position, seed, server_error=None):
    """The mean of every rank's `x` over `process_set`, through `codec` in two legs.

    Args:
        x: this rank's flat float32 vector (its error added), of `lengths.shape[0]` chunks (one per
            rank of the set) of whole bytes.
        lengths: int [chunks, M]: each chunk's segments (`Layout.lengths`).
        codec: what encodes and decodes chunks.
        process_set: the set (of `lengths.shape[0]` ranks).
        position: this rank's place in the set (the chunk it owns).
        seed: an int64 [2] tensor, different on every rank and step (for codecs that round at random).
        server_error: this rank's float32 variable for the chunk it owns, or None (no server error).

    Returns:
        `(mean, what x lost (the new worker error), [the server error's update])`; the first two
        flat like `x`.

    Example:

    >>> mean, residual, updates = compressed_mean(x, layout.lengths(0), codec, 0, tfring.rank(), seed, server)
    """
    size = lengths.shape[0]
    chunks = tf.reshape(x, [size, -1])
    scales, payload = codec.encode(chunks, lengths, seed)
    residual = tf.reshape(chunks - codec.decode(scales, payload, lengths), [-1])
    own = lengths[position:position + 1]
    # To the owner of each chunk: its encoding from every rank.
    got_payload = collectives.alltoall(payload, process_set=process_set)[0]
    got_scales = collectives.alltoall(scales, process_set=process_set)[0]
    y = tf.reduce_mean(codec.decode(got_scales, got_payload, np.tile(own, [size, 1])), axis=0)
    if server_error is not None:
        y = y + server_error
    server_scales, server_payload = codec.encode(y[None, :], own, seed + [0, 1])
    all_payload = collectives.allgather(server_payload, process_set=process_set)
    all_scales = collectives.allgather(server_scales, process_set=process_set)
    mean = tf.reshape(codec.decode(all_scales, all_payload, lengths), [-1])
    updates = []
    if server_error is not None:
        updates.append(server_error.assign(y - codec.decode(server_scales, server_payload, own)[0]))
    return mean, residual, updates


class Layout:
    """Where a bucket's tensors lie in the flat vector a compression runs on: `length` elements
    padded to `parts` parts of `chunks` chunks of `chunk` elements each (a multiple of 8).

    Args:
        sizes: each tensor's number of elements, in order.
        parts: how many parts the vector is cut into first (the ranks of a host; 1 without).
        chunks: chunks per part (the ranks the part is compressed among).

    Example:

    >>> Layout([5, 3], parts=1, chunks=2).lengths(0)   # chunks of 8: [[5, 3], [8, 0]]
    """

    def __init__(self, sizes, parts, chunks):
        self.length, self.parts, self.chunks = int(sum(sizes)), parts, chunks
        per_chunk = -(-self.length // (parts * chunks))
        self.chunk = max(-(-per_chunk // 8) * 8, 8)
        self.part = chunks * self.chunk
        self._ends = set(np.cumsum(sizes).tolist())
        self._width = max(len(self._segments(p, k)) for p in range(parts) for k in range(chunks))

    def padded(self, vector):
        """`vector` (of `length` elements) with zeros after it, to `parts * part` elements."""
        return tf.pad(vector, [[0, self.parts * self.part - self.length]])

    def lengths(self, part):
        """The segments of part `part`, chunk by chunk: each tensor's elements in a chunk are a
        segment, and so is the padding; rows are padded with zero-length segments to the same
        count, which every part shares.

        Args:
            part: which part (0 ... parts - 1).

        Returns:
            An int64 NumPy array [chunks, M]; each row sums to `chunk`.
        """
        rows = [self._segments(part, k) for k in range(self.chunks)]
        return np.array([row + [0] * (self._width - len(row)) for row in rows], np.int64)

    def _segments(self, part, k):
        start = (part * self.chunks + k) * self.chunk
        end = start + self.chunk
        cuts = sorted({start, end} | {b for b in self._ends | {self.length} if start < b < end})
        return [b - a for a, b in zip(cuts, cuts[1:])]


def segment_sums(values, lengths):
    """The sum of each segment of `values` (a [rows, chunk] tensor cut by `lengths`).

    Args:
        values: a float32 [rows, chunk] tensor.
        lengths: int [rows, M], each row summing to `chunk`.

    Returns:
        A float32 [rows, M] tensor (0 for a zero-length segment).

    Example:

    >>> segment_sums(tf.ones([1, 8]), [[5, 3]])   # [[5.0, 3.0]]
    """
    return _per_segment(values, lengths, tf.reduce_sum)


def segment_maxima(values, lengths):
    """The largest element of each segment of `values` (0 for a zero-length segment).

    Args:
        values: a float32 [rows, chunk] tensor of values >= 0.
        lengths: int [rows, M], each row summing to `chunk`.

    Returns:
        A float32 [rows, M] tensor.

    Example:

    >>> segment_maxima(tf.abs(chunks), lengths)
    """
    return _per_segment(values, lengths, lambda part: tf.maximum(tf.reduce_max(part), 0.0))


def times_segment(values, factors, lengths):
    """Each element of `values` times its segment's factor.

    Args:
        values: a float32 [rows, chunk] tensor.
        factors: a float32 [rows, M] tensor.
        lengths: int [rows, M], each row summing to `chunk`.

    Returns:
        A float32 [rows, chunk] tensor.

    Example:

    >>> times_segment(signs, scales, lengths)   # each sign at its segment's scale
    """
    lengths, parts = _split(values, lengths)
    flat_factors = tf.unstack(tf.reshape(factors, [-1]), num=lengths.size)
    return tf.reshape(tf.concat([p * f for p, f in zip(parts, flat_factors)], axis=0), tf.shape(values))


def _split(values, lengths):
    """`lengths` as an int64 array, and `values` cut into its segments, in order."""
    lengths = np.asarray(lengths, np.int64)
    return lengths, tf.split(tf.reshape(values, [-1]), lengths.ravel().tolist())


def _per_segment(values, lengths, reduce):
    """`reduce` of each segment of `values`, shaped like `lengths`."""
    lengths, parts = _split(values, lengths)
    return tf.reshape(tf.stack([reduce(p) for p in parts]), lengths.shape)


def _seed(state, bucket):
    # Stateless random rounding: the same step of the same run rounds the same way; every rank and
    # bucket its own stream.
    return tf.stack([state.iteration, tf.constant(runtime.rank() * 4096 + bucket.index * 2, tf.int64)])


def _flat(grads, errors=()):
    errors = list(errors) or [0.0] * len(grads)
    return tf.concat([tf.reshape(tf.cast(g, tf.float32), [-1]) + tf.reshape(e, [-1]) for g, e in zip(grads, errors)],
                     axis=0)


def _shaped_like(vector, grads, updates):
    """`vector` cut into tensors shaped and typed like `grads`, once `updates` ran."""
    with tf.control_dependencies(updates):
        return [tf.cast(tf.reshape(part, tf.shape(g)), g.dtype)
                for part, g in zip(tf.split(vector, [g.shape.num_elements() for g in grads]), grads)]

