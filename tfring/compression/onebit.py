"""1-bit compression with error feedback: DeepSpeed's compressed allreduce (Tang et al., 2021) with
signs, 8 to a byte, and one scale per tensor in each chunk (see `compressed_allreduce`).

The scale is the segment's norm over the square root of its length (DeepSpeed's): the decoded
segment has the norm of what went in. Smaller scales (the mean absolute value; a mean for the
positive and one for the negative elements) were measured and learn slower.

The first `warmup_steps` steps travel exactly. Integer gradients travel exactly always.
"""

import tensorflow as tf

from tfring.compression import compressed_allreduce

_BIT_WEIGHTS = (128, 64, 32, 16, 8, 4, 2, 1)


class OneBit(compressed_allreduce.TwoLegCompressor):
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

    name = "OneBit"
    error_feedback = True

    def __init__(self, warmup_steps=10, hierarchical=True):
        super().__init__(warmup_steps, hierarchical)

    @staticmethod
    def encode(chunks, lengths, seed):
        """The codec's encoding: `compress_chunks` (signs round the same way always: no seed)."""
        del seed
        return compress_chunks(chunks, lengths)

    @staticmethod
    def decode(scales, payload, lengths):
        """The codec's decoding: `decompress_chunks`."""
        return decompress_chunks(scales, payload, lengths)


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
    counts = tf.maximum(tf.cast(tf.constant(lengths), tf.float32), 1.0)
    scales = tf.sqrt(compressed_allreduce.segment_sums(chunks * chunks, lengths) / counts)
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
    shifts = tf.constant([7, 6, 5, 4, 3, 2, 1, 0], tf.uint8)
    unpacked = tf.bitwise.bitwise_and(tf.bitwise.right_shift(bits[:, :, None], shifts), 1)
    signs = tf.reshape(tf.cast(unpacked, tf.float32) * 2.0 - 1.0, [tf.shape(bits)[0], -1])
    return compressed_allreduce.times_segment(signs, scales, lengths)
