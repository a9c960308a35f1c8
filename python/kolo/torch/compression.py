"""Gradient compression for kolo.torch allreduces (horovod.torch's
Compression).

Compression.fp16 / bf16 send floating-point tensors as 16-bit floats;
compress() and decompress() cast as Horovod's do. Inside Kolo's collectives
float32 tensors skip the cast: kolod rounds each rank's input and the result
natively (the reduction itself accumulates in float32). Integer and bool
tensors travel as they are. A custom Compressor (compress/decompress without
`kolo_code`) works too: its compressed tensor travels as it is.
"""

import torch

from kolo._compression import Compressor, NoneCompressor  # noqa: F401


class FP16Compressor(Compressor):
    """Floating-point tensors travel as float16."""

    kolo_code = 1
    _wire = torch.float16

    @classmethod
    def compress(cls, tensor):
        if tensor.dtype.is_floating_point and tensor.dtype != cls._wire:
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


def prepare(compression, tensor):
    """(tensor to send, ctx for decompress, native wire format): a float32
    tensor under Kolo's fp16/bf16 compression is sent as it is and narrowed
    by kolod; everything else goes through compression.compress()."""
    code = getattr(compression, "kolo_code", 0) if compression is not None else 0
    if code and tensor.dtype == torch.float32:
        return tensor, None, int(code)
    if compression is None:
        return tensor, None, 0
    compressed, ctx = compression.compress(tensor)
    return compressed, ctx, 0


def prepare_group(compression, tensors):
    """([(tensor to send, ctx)], wire format) for a group, which travels in
    one wire format: kolod narrows it only if every tensor is float32 under
    Kolo's fp16/bf16, else every tensor goes through compression.compress()."""
    code = getattr(compression, "kolo_code", 0) if compression is not None else 0
    if code and all(t.dtype == torch.float32 for t in tensors):
        return [(t, None) for t in tensors], int(code)
    if compression is None:
        return [(t, None) for t in tensors], 0
    return [compression.compress(t) for t in tensors], 0
