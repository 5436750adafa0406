"""QSGD-style 8-bit compression (Alistarh et al., 2017): each element as one of 255 levels of its
segment's largest magnitude, rounded up or down at random with the probabilities that make it
exact on average; the two legs of `compressed_allreduce`, without error feedback (unbiased rounding
needs none).
"""

import tensorflow as tf

from tfring.compression import compressed_allreduce

LEVELS = 127  # per sign: int8 from -127 to 127


class QSGD(compressed_allreduce.TwoLegCompressor):
    """Gradient compression to 8 bits per element with random rounding: approximate, opt-in.

    **Not equal to one process**: each element travels as an int8 level of its segment's largest
    magnitude (one scale per tensor in each chunk), rounded at random so that it is exact on
    average; a chunk is rounded twice (by every rank, then by its owner). 4 times fewer bytes than
    float32. The rounding draws from a stateless generator seeded by the step, the rank and the
    bucket, so a run repeats exactly; every rank applies the same result, so the ranks' weights
    stay identical.

    Args:
        warmup_steps: steps that travel exactly before compression starts (default 0).
        hierarchical: on a job of several hosts with several ranks each, reduce exactly inside
            each host and compress only between hosts (default True), as `OneBit` does.

    Example:

    >>> strategy = tfring.RingStrategy(compression=tfring.compression.QSGD())
    """

    name = "QSGD"

    def __init__(self, warmup_steps=0, hierarchical=True):
        super().__init__(warmup_steps, hierarchical)

    @staticmethod
    def encode(chunks, lengths, seed):
        """The codec's encoding: `quantize`."""
        return quantize(chunks, lengths, seed)

    @staticmethod
    def decode(scales, payload, lengths):
        """The codec's decoding: `dequantize`."""
        return dequantize(scales, payload, lengths)


def quantize(chunks, lengths, seed):
    """Each segment's largest magnitude, and every element as a level of it, rounded at random.

    Args:
        chunks: a float32 [rows, chunk] tensor.
        lengths: int [rows, M]: each row's segments (see `compressed_allreduce.Layout`).
        seed: an int64 [2] tensor for `tf.random.stateless_uniform`.

    Returns:
        `(scales float32 [rows, M], levels uint8 [rows, chunk])`: each level an int8 in
        [-127, 127], carried as its bytes.

    Example:

    >>> scales, levels = quantize(chunks, lengths, tf.constant([0, 0], tf.int64))
    """
    scales = compressed_allreduce.segment_maxima(tf.abs(chunks), lengths)
    inverse = tf.math.divide_no_nan(tf.constant(float(LEVELS)), scales)
    exact = compressed_allreduce.times_segment(chunks, inverse, lengths)  # in [-127, 127]
    noise = tf.random.stateless_uniform(tf.shape(chunks), seed=seed, dtype=tf.float32)
    levels = tf.clip_by_value(tf.floor(exact + noise), -LEVELS, LEVELS)
    return scales, tf.bitcast(tf.cast(levels, tf.int8), tf.uint8)


def dequantize(scales, levels, lengths):
    """The values `quantize` encoded: each level times its segment's scale / 127.

    Args:
        scales: float32 [rows, M].
        levels: uint8 [rows, chunk], as `quantize` returns them.
        lengths: int [rows, M].

    Returns:
        A float32 [rows, chunk] tensor.

    Example:

    >>> dequantize(*quantize(chunks, lengths, seed), lengths)   # chunks, to within a level
    """
    values = tf.cast(tf.bitcast(levels, tf.int8), tf.float32)
    return compressed_allreduce.times_segment(values, scales / LEVELS, lengths)
