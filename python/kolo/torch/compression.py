"""Gradient compression for kolo.torch allreduces (horovod.torch's
Compression).

Compression.fp16 / bf16 send float32 tensors as 16-bit floats: kolod rounds
each rank's input and the result natively (the reduction itself accumulates in
float32), so no cast runs in Python. Other floating-point dtypes are cast to
the 16-bit type around the allreduce; integer and bool tensors travel as they
are. A custom Compressor (compress/decompress without `kolo_code`) works too:
its compressed tensor travels as it is.
"""

import torch

from kolo._compression import Compressor, NoneCompressor  # noqa: F401


class FP16Compressor(Compressor):
    """Floating-point tensors travel as float16."""

    kolo_code = 1
    _wire = torch.float16

    @classmethod
    def compress(cls, tensor):
        if tensor.dtype.is_floating_point and tensor.dtype not in (cls._wire, torch.float32):
            return tensor.to(cls._wire), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tensor.to(ctx)


class BF16Compressor(FP16Compressor):
    """Floating-point tensors travel as bfloat16."""

    kolo_code = 2
    _wire = torch.bfloat16


class Compression:
    """The compressors DistributedOptimizer and allreduce accept."""

    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor


def wire_code(compression, tensor):
    """The native wire format for `tensor` under `compression`: only float32
    tensors are narrowed by kolod."""
    code = getattr(compression, "kolo_code", 0) if compression is not None else 0
    return int(code) if tensor.dtype == torch.float32 else 0
