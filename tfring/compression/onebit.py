"""1-bit compression with error feedback: DeepSpeed's compressed allreduce (Tang et al., 2021).

Signs cannot be summed on a ring without compressing again at every hop, so a bucket travels in
two legs, each one bit per element plus a few scales per chunk:

1. worker: x = this rank's gradients (one flat float32 vector, padded to whole bytes per rank)
   + its worker error; x is cut into one chunk per rank; each chunk is sent as its signs (8 to a
   byte) and one scale for each tensor's part of it (that part's norm over the square root of its
   length: layers whose gradients differ in size by orders of magnitude keep their own size); the
   worker error keeps x minus what was sent;
2. all-to-all: chunk j goes to rank j, which averages what every rank sent it, adds its server
   error, and compresses that again the same way (the server error keeps what this loses);
3. allgather: every rank receives every chunk's signs and scales and decompresses the same vector.

On a job of several hosts with several ranks each, the ranks of a host first reduce the bucket
exactly among themselves (a reduce-scatter over shared memory: each holds the host's sum of one
part), the parts go through 1-bit between the hosts (each rank with its peers of the same local
rank), and an allgather inside the host puts them together: only 1 bit per element crosses
between hosts, as on a job of one rank per host.

The first `warmup_steps` steps travel exactly. Integer gradients travel exactly always.
"""

import numpy as np
import tensorflow as tf

from tfring import checks
from tfring.compression import hook_state
from tfring.ops import collectives

_BIT_WEIGHTS = (128, 64, 32, 16, 8, 4, 2, 1)


class OneBit:
    """Gradient compression to one bit per element with error feedback: approximate, opt-in.

    **Not equal to one process**: each step applies a sign-and-scale approximation of the job's
    gradients (32 times fewer bytes than float32 after the warm-up); what each step loses is
    carried into the next on every rank (worker errors) and on each chunk's owner (server
    errors). Every rank applies the same approximation, so the ranks' weights stay identical.

    Args:
        warmup_steps: steps that travel exactly before compression starts (DeepSpeed's
            `freeze_step`: 15-25 % of training for 1-bit Adam; fewer for SGD).
        hierarchical: on a job of several hosts with several ranks each (numbered host by host,
            as `tfring run` numbers them), reduce exactly inside each host and compress only
            between hosts (default True; elsewhere it changes nothing).

    Example:

    >>> strategy = tfring.RingStrategy(compression=tfring.compression.OneBit(warmup_steps=100))
    """

    def __init__(self, warmup_steps=10, hierarchical=True):
        self.warmup_steps = checks.number("OneBit", "warmup_steps", warmup_steps, integer=True, at_least=0)
        self.hierarchical = bool(hierarchical)

    def __repr__(self):
        return f"OneBit(warmup_steps={self.warmup_steps}, hierarchical={self.hierarchical})"

    def new_state(self):
        """A fresh `CommHookState` for this compressor (each strategy or optimizer holds its own)."""
        return hook_state.CommHookState("OneBit")

    def __call__(self, state, bucket):
        """The hook: see the module docstring.

        Args:
            state: this compressor's `CommHookState` (`new_state()`).
            bucket: a `GradientBucket`.

        Returns:
            A `Future` of the bucket's approximated gradients.
        """
        grads = bucket.gradients
        floating = [k for k, g in enumerate(grads) if g.dtype.is_floating]
        if not floating:
            return bucket.allreduce(grads)
        hosts = None
        if self.hierarchical and bucket.process_set == 0 and bucket.size > 1:
            hosts = state.host_sets()
        compress = _Hierarchical(state, bucket, floating, hosts) if hosts else _Flat(state, bucket, floating)
        return bucket.compressed_after_warmup(floating, state.iteration, self.warmup_steps, compress)


class _Flat:
    """The compressed allreduce over the bucket's ranks; worker errors kept per gradient."""

    def __init__(self, state, bucket, floating):
        self.bucket, self.grads = bucket, [bucket.gradients[k] for k in floating]
        self.errors = [state.memory("worker_error", bucket.variables[k], bucket.gradients[k], _zeros,
                                    dtype=tf.float32, position=(bucket.index, k)) for k in floating]
        self.layout = Layout([g.shape.num_elements() for g in self.grads], parts=1, chunks=bucket.size)
        self.server = state.memory("server_error", [bucket.variables[k] for k in floating], self.grads[0], _zeros,
                                   shape=[self.layout.chunk], dtype=tf.float32, position=(bucket.index, "server"))

    def __call__(self):
        bucket, layout = self.bucket, self.layout
        x = layout.padded(_flat(self.grads, self.errors))
        mean, residual, server_update = compressed_mean(
            x, layout.lengths(0), self.server, bucket.process_set, collectives.position("OneBit", bucket.process_set))
        scale = float(bucket.size) if bucket.op == "sum" else 1.0
        residual = residual[:layout.length]
        updates = [server_update] + [e.assign(tf.reshape(part, e.shape)) for e, part in
                                     zip(self.errors, tf.split(residual, [e.shape.num_elements() for e in self.errors]))]
        return _shaped_like(mean[:layout.length] * scale, self.grads, updates)


class _Hierarchical:
    """An exact reduce-scatter inside the host, the compressed allreduce of this rank's part
    between the hosts, and an allgather inside the host; the worker error is kept per part."""

    def __init__(self, state, bucket, floating, hosts):
        self.bucket, self.hosts, self.grads = bucket, hosts, [bucket.gradients[k] for k in floating]
        owners = [bucket.variables[k] for k in floating]
        self.layout = Layout([g.shape.num_elements() for g in self.grads], parts=hosts.local_size, chunks=hosts.hosts)
        self.error = state.memory("worker_error", owners, self.grads[0], _zeros, shape=[self.layout.part],
                                  dtype=tf.float32, position=(bucket.index, "part"))
        self.server = state.memory("server_error", owners, self.grads[0], _zeros, shape=[self.layout.chunk],
                                   dtype=tf.float32, position=(bucket.index, "server"))

    def __call__(self):
        bucket, hosts, layout = self.bucket, self.hosts, self.layout
        rows = tf.reshape(layout.padded(_flat(self.grads)), [hosts.local_size, layout.part])
        host_sum = collectives.reducescatter(rows, op="sum", process_set=hosts.local)[0]
        mean, residual, server_update = compressed_mean(
            host_sum + self.error, layout.lengths(hosts.local_rank), self.server, hosts.cross, hosts.host)
        everything = tf.reshape(collectives.allgather(mean[None, :], process_set=hosts.local), [-1])
        # `mean` is the mean over hosts of each host's sum.
        scale = float(hosts.hosts) if bucket.op == "sum" else 1.0 / hosts.local_size
        updates = [server_update, self.error.assign(residual)]
        return _shaped_like(everything[:layout.length] * scale, self.grads, updates)


def compressed_mean(x, lengths, server_error, process_set, position):
    """The 1-bit mean of every rank's `x` over `process_set`: worker and server compression.

    Args:
        x: this rank's flat float32 vector (its error added), cut in `lengths.shape[0]` chunks
            (one per rank of the set) of whole bytes.
        lengths: int [chunks, M]: each chunk's segments (a tensor's part, or padding), each
            compressed with a scale of its own (see `Layout.lengths`).
        server_error: this rank's float32 variable for the chunk it owns.
        process_set: the set (of `lengths.shape[0]` ranks).
        position: this rank's place in the set (the chunk it owns).

    Returns:
        `(mean, what x lost (the new worker error), the server error's update)`, each flat like `x`
        but the update.

    Example:

    >>> mean, residual, update = compressed_mean(x, layout.lengths(0), server, 0, tfring.rank())
    """
    size, chunk = lengths.shape[0], server_error.shape[0]
    chunks = tf.reshape(x, [size, chunk])
    scales, bits = compress_chunks(chunks, lengths)
    residual = tf.reshape(chunks - decompress_chunks(scales, bits, lengths), [-1])
    own = lengths[position:position + 1]
    # To the owner of each chunk: its signs and scales from every rank.
    got_bits = collectives.alltoall(bits, process_set=process_set)[0]
    got_scales = collectives.alltoall(scales, process_set=process_set)[0]
    mine = tf.reduce_mean(decompress_chunks(got_scales, got_bits, np.tile(own, [size, 1])), axis=0)
    y = mine + server_error
    server_scales, server_bits = compress_chunks(y[None, :], own)
    all_bits = collectives.allgather(server_bits, process_set=process_set)
    all_scales = collectives.allgather(server_scales, process_set=process_set)
    mean = tf.reshape(decompress_chunks(all_scales, all_bits, lengths), [-1])
    update = server_error.assign(y - decompress_chunks(server_scales, server_bits, own)[0])
    return mean, residual, update


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


def compress_chunks(chunks, lengths):
    """Each segment's scale (its norm over the square root of its length) and every element's sign,
    packed 8 to a byte (a bit is 1 where the value is >= 0).

    Args:
        chunks: a float32 [rows, chunk] tensor, chunk a multiple of 8.
        lengths: int [rows, M]: the lengths of each row's segments, in order (each row sums to
            `chunk`; zero-length segments are allowed).

    Returns:
        `(scales float32 [rows, M], bits uint8 [rows, chunk / 8])`.

    Example:

    >>> compress_chunks(tf.constant([[3.0, -4.0] * 4]), [[8]])   # scale [[3.5355]], bits [[0b10101010]]
    """
    lengths = np.asarray(lengths, np.int64)
    squares = tf.split(tf.reshape(chunks * chunks, [-1]), lengths.ravel().tolist())
    sums = tf.stack([tf.reduce_sum(s) for s in squares])
    scales = tf.reshape(tf.sqrt(sums / np.maximum(lengths.ravel(), 1).astype(np.float32)), lengths.shape)
    signs = tf.cast(chunks >= 0, tf.int32)
    grouped = tf.reshape(signs, [tf.shape(chunks)[0], -1, 8])
    bits = tf.cast(tf.reduce_sum(grouped * tf.constant(_BIT_WEIGHTS, tf.int32), axis=2), tf.uint8)
    return scales, bits


def decompress_chunks(scales, bits, lengths):
    """Each packed sign times its segment's scale: the inverse of `compress_chunks` (padding, a
    segment of its own, comes back as 0 where it went in as 0).

    Args:
        scales: float32 [rows, M].
        bits: uint8 [rows, chunk / 8].
        lengths: int [rows, M], as for `compress_chunks`.

    Returns:
        A float32 [rows, chunk] tensor.

    Example:

    >>> scales, bits = compress_chunks(chunks, lengths)
    >>> decompress_chunks(scales, bits, lengths)   # each element: its segment's scale, signed
    """
    lengths = np.asarray(lengths, np.int64)
    shifts = tf.constant([7, 6, 5, 4, 3, 2, 1, 0], tf.uint8)
    unpacked = tf.bitwise.bitwise_and(tf.bitwise.right_shift(bits[:, :, None], shifts), 1)
    signs = tf.reshape(tf.cast(unpacked, tf.float32) * 2.0 - 1.0, [-1])
    flat_scales = tf.unstack(tf.reshape(scales, [-1]), num=lengths.size)
    parts = [s * scale for s, scale in zip(tf.split(signs, lengths.ravel().tolist()), flat_scales)]
    return tf.reshape(tf.concat(parts, axis=0), [tf.shape(bits)[0], -1])


def _flat(grads, errors=None):
    errors = errors or [0.0] * len(grads)
    return tf.concat([tf.reshape(tf.cast(g, tf.float32), [-1]) + tf.reshape(e, [-1]) for g, e in zip(grads, errors)],
                     axis=0)


def _shaped_like(vector, grads, updates):
    """`vector` cut into tensors shaped and typed like `grads`, once `updates` ran."""
    with tf.control_dependencies(updates):
        return [tf.cast(tf.reshape(part, tf.shape(g)), g.dtype)
                for part, g in zip(tf.split(vector, [g.shape.num_elements() for g in grads]), grads)]


def _zeros(shape, dtype):
    return tf.zeros(shape, dtype)
