"""Gradient compression for kolo.tensorflow allreduces, with Horovod's
Compressor API: compress(tensor) -> (compressed, ctx) and
decompress(tensor, ctx) -> tensor.

Compression.fp16.compress casts a floating tensor to float16 and returns its
dtype as the context; decompress casts back to it (other dtypes pass
through). Called by allreduce on a float32 tensor, Compression.fp16 (and
bf16) leave the rounding to kolod instead, which sends each rank's input
and the result as float16 but accumulates the reduction in float32. A
compressor of one's own (any class with compress/decompress, a subclass of
these included) is called around the collective as it is.
"""

import tensorflow as tf

from kolo._compression import Compressor, NoneCompressor  # noqa: F401


class FP16Compressor(Compressor):
    """Floating tensors travel as float16 (Horovod's Compression.fp16)."""

    kolo_code = 1
    wire_dtype = tf.float16

    @classmethod
    def compress(cls, tensor):
        tensor = tf.convert_to_tensor(tensor)
        if tensor.dtype.is_floating and tensor.dtype != cls.wire_dtype:
            return tf.cast(tensor, cls.wire_dtype), tensor.dtype
        return tensor, tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        if ctx is not None and tf.as_dtype(ctx).is_floating and tensor.dtype != ctx:
            return tf.cast(tensor, ctx)
        return tensor


class BF16Compressor(FP16Compressor):
    """Floating tensors travel as bfloat16."""

    kolo_code = 2
    wire_dtype = tf.bfloat16


class Compression:
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor


def native_code(compression):
    """kolod's wire code when `compression` is Kolo's own fp16/bf16 (its
    compress/decompress not overridden): a float32 allreduce then leaves the
    rounding to kolod. 0 for any other compressor."""
    if compression is None:
        return 0
    for builtin in (FP16Compressor, BF16Compressor):
        if (getattr(compression, "kolo_code", 0) == builtin.kolo_code
                and getattr(compression, "compress", None) == builtin.compress
                and getattr(compression, "decompress", None) == builtin.decompress):
            return builtin.kolo_code
    return 0
