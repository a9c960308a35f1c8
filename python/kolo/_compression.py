"""The framework-neutral part of gradient compression: the Compressor
interface kolo.tensorflow and kolo.torch share."""


class Compressor:
    """compress(tensor) -> (tensor, ctx); decompress(tensor, ctx) -> tensor.
    `kolo_code` is the wire format kolod applies to float32 tensors (0: as
    they are, 1: float16, 2: bfloat16); a custom compressor without it sends
    its compressed tensor as it is."""

    kolo_code = 0

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class NoneCompressor(Compressor):
    """Tensors travel as they are."""
