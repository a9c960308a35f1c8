"""Gradient compression for kolo.tensorflow allreduces.

Compression.fp16 sends float32 tensors as float16: Kolo rounds each rank's
input and the result natively (the reduction itself accumulates in float32);
float64 tensors are cast to float16 and back around the allreduce. Other
dtypes travel as they are.
"""

import tensorflow as tf

from kolo._compression import Compressor, NoneCompressor  # noqa: F401


class FP16Compressor(Compressor):
    kolo_code = 1

    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating and tensor.dtype not in (tf.float16, tf.float32):
            return tf.cast(tensor, tf.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tf.cast(tensor, ctx)


class BF16Compressor(FP16Compressor):
    kolo_code = 2

    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating and tensor.dtype not in (tf.bfloat16, tf.float32):
            return tf.cast(tensor, tf.bfloat16), tensor.dtype
        return tensor, None


class Compression:
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
