"""1-bit compression with error feedback: DeepSpeed's compressed allreduce (Tang et al., 2021).

Signs cannot be summed on a ring without compressing again at every hop, so a bucket travels in
two legs, each one bit per element plus one scale per chunk:

1. worker: x = this rank's gradients (one flat float32 vector, padded to whole bytes per rank)
   + its worker error; x is cut into one chunk per rank; each chunk is sent as its signs (8 to a
   byte) and one scale, ||chunk|| / sqrt(its length); the worker error keeps x minus what was sent;
2. all-to-all: chunk j goes to rank j, which averages what every rank sent it, adds its server
   error, and compresses that again the same way (the server error keeps what this loses);
3. allgather: every rank receives every chunk's signs and scale and decompresses the same vector.

The first `warmup_steps` steps travel exactly. Integer gradients travel exactly always.
"""

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

    Example:

    >>> strategy = tfring.RingStrategy(compression=tfring.compression.OneBit(warmup_steps=100))
    """

    def __init__(self, warmup_steps=10):
        self.warmup_steps = checks.number("OneBit", "warmup_steps", warmup_steps, integer=True, at_least=0)

    def __repr__(self):
        return f"OneBit(warmup_steps={self.warmup_steps})"

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
        sent = [grads[k] for k in floating]
        errors = [state.memory("worker_error", bucket.variables[k], grads[k], _zeros, dtype=tf.float32,
                               position=(bucket.index, k)) for k in floating]
        layout = _Layout(sum(g.shape.num_elements() for g in sent), bucket.size)
        server = state.memory("server_error", [bucket.variables[k] for k in floating], sent[0], _zeros,
                              shape=[layout.chunk], dtype=tf.float32, position=(bucket.index, "server"))
        return bucket.compressed_after_warmup(floating, state.iteration, self.warmup_steps,
                                              lambda: self._compressed(bucket, sent, errors, server, layout))

    def _compressed(self, bucket, grads, errors, server_error, layout):
        x = layout.padded(tf.concat([tf.reshape(tf.cast(g, tf.float32), [-1]) + tf.reshape(e, [-1])
                                     for g, e in zip(grads, errors)], axis=0))
        chunks = tf.reshape(x, [bucket.size, layout.chunk])
        mask = layout.mask()
        own_mask = tf.gather(mask, [collectives.position("OneBit", bucket.process_set)])  # the chunk this rank owns
        scales, bits = compress_chunks(chunks, mask)
        sent_back = decompress_chunks(scales, bits, mask)
        # To the owner of each chunk: its signs and scale from every rank.
        got_bits = collectives.alltoall(bits, process_set=bucket.process_set)[0]
        got_scales = collectives.alltoall(scales, process_set=bucket.process_set)[0]
        mine = tf.reduce_mean(decompress_chunks(got_scales, got_bits, tf.tile(own_mask, [bucket.size, 1])), axis=0)
        if bucket.op == "sum":
            mine = mine * tf.cast(bucket.size, tf.float32)
        y = mine + server_error
        server_scale, server_bits = compress_chunks(y[None, :], own_mask)
        all_bits = collectives.allgather(server_bits, process_set=bucket.process_set)
        all_scales = collectives.allgather(server_scale, process_set=bucket.process_set)
        result = tf.reshape(decompress_chunks(all_scales, all_bits, mask), [-1])[:layout.length]
        updates = [server_error.assign(y - decompress_chunks(server_scale, server_bits, own_mask)[0])]
        residual = tf.reshape(chunks - sent_back, [-1])[:layout.length]
        for e, part in zip(errors, tf.split(residual, [e.shape.num_elements() for e in errors])):
            updates.append(e.assign(tf.reshape(part, e.shape)))
        with tf.control_dependencies(updates):
            return [tf.cast(tf.reshape(part, tf.shape(g)), g.dtype)
                    for part, g in zip(tf.split(result, [g.shape.num_elements() for g in grads]), grads)]


class _Layout:
    """A bucket's flat vector of `length` elements padded to `size` chunks of whole bytes."""

    def __init__(self, length, size):
        self.length, self.size = length, size
        per_rank = -(-length // size)
        self.chunk = -(-per_rank // 8) * 8

    def padded(self, vector):
        return tf.pad(vector, [[0, self.chunk * self.size - self.length]])

    def mask(self):
        """1 where a chunk holds an element, 0 where it holds padding: [size, chunk]."""
        index = tf.reshape(tf.range(self.size * self.chunk), [self.size, self.chunk])
        return tf.cast(index < self.length, tf.float32)


def compress_chunks(chunks, mask):
    """Each row's scale (its norm over the square root of its elements) and signs packed 8 to a
    byte (a bit is 1 where the value is >= 0).

    Args:
        chunks: a float32 [rows, chunk] tensor, chunk a multiple of 8.
        mask: 1 for elements, 0 for padding, like `chunks`.

    Returns:
        `(scales [rows], bits uint8 [rows, chunk / 8])`.

    Example:

    >>> compress_chunks(tf.constant([[3.0, -4.0] * 4]), tf.ones([1, 8]))   # scale 3.5355, bits 0b10101010
    """
    chunks = chunks * mask
    count = tf.maximum(tf.reduce_sum(mask, axis=1), 1.0)
    scales = tf.norm(chunks, axis=1) / tf.sqrt(count)
    signs = tf.cast(chunks >= 0, tf.int32)
    grouped = tf.reshape(signs, [tf.shape(chunks)[0], -1, 8])
    bits = tf.cast(tf.reduce_sum(grouped * tf.constant(_BIT_WEIGHTS, tf.int32), axis=2), tf.uint8)
    return scales, bits


def decompress_chunks(scales, bits, mask):
    """scale * (+1 or -1) for each packed sign, 0 at padding: the inverse of `compress_chunks`.

    Args:
        scales: [rows] float32.
        bits: uint8 [rows, chunk / 8].
        mask: [rows, chunk].

    Returns:
        A float32 [rows, chunk] tensor.

    Example:

    >>> scales, bits = compress_chunks(chunks, mask)
    >>> decompress_chunks(scales, bits, mask)   # each element: its chunk's scale, signed
    """
    shifts = tf.constant([7, 6, 5, 4, 3, 2, 1, 0], tf.uint8)
    unpacked = tf.bitwise.bitwise_and(tf.bitwise.right_shift(bits[:, :, None], shifts), 1)
    signs = tf.reshape(tf.cast(unpacked, tf.float32) * 2.0 - 1.0, [tf.shape(bits)[0], -1])
    return signs * scales[:, None] * mask


def _zeros(shape, dtype):
    return tf.zeros(shape, dtype)
