"""Horovod's gradient compression: `hvd.Compression.none` and `hvd.Compression.fp16`."""

import tensorflow as tf

from tfring.compression import default_hooks


class Compressor:
    """How a tensor is compressed before it travels and restored after (Horovod's interface)."""

    @staticmethod
    def compress(tensor):
        """Returns the tensor to send and what `decompress` needs."""
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        """Returns the received tensor restored."""
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends tensors as they are (the default)."""

    @staticmethod
    def compress(tensor):
        """Returns `tensor` unchanged."""
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        """Returns `tensor` unchanged."""
        return tensor


class FP16Compressor(Compressor):
    """Sends floating-point tensors as float16 and casts them back: results are not exact."""

    @staticmethod
    def compress(tensor):
        """Returns `tensor` as float16 when it is floating-point, and its type."""
        return default_hooks.narrowed(tensor, tf.float16), tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        """Returns `tensor` in its original type `ctx`."""
        return default_hooks.restored(tensor, ctx)


class Compression:
    """The compressors a Horovod call takes (`compression=hvd.Compression.fp16`).

    Example:

    >>> opt = hvd.DistributedOptimizer(opt, compression=hvd.Compression.fp16)
    """

    none = NoneCompressor
    fp16 = FP16Compressor
