"""kolo.torch's plumbing under its collectives: torch dtypes as kolod's
codes, NumPy views of CPU tensors (libkolo's buffers), tensors in the
session's shared-memory arena, and the handles `*_async` calls return with
the functions that finish them (the result of an allgather, reducescatter
or alltoall copied once from shared memory into a new tensor)."""

import threading

import numpy as np
import torch

from kolo import _shared
from kolo._native import core
from kolo.errors import KoloError

# kolod's name of each torch dtype it carries (the names of kolo._core.DTYPES,
# where the codes come from; torch spells them the same).
DTYPE_NAMES = {
    torch.uint8: "uint8", torch.int8: "int8", torch.int16: "int16", torch.uint16: "uint16",
    torch.int32: "int32", torch.int64: "int64", torch.float16: "float16",
    torch.bfloat16: "bfloat16", torch.float32: "float32", torch.float64: "float64",
    torch.bool: "bool",
}
_DTYPE_CODES = {t: _shared.DTYPE_CODES[n] for t, n in DTYPE_NAMES.items()}


def _code(tensor):
    code = _DTYPE_CODES.get(tensor.dtype)
    if code is None:
        raise TypeError(f"kolo.torch does not support dtype {tensor.dtype}; supported: "
                        + ", ".join(str(t).replace("torch.", "") for t in _DTYPE_CODES))
    return code


def _host(tensor):
    """A NumPy array over `tensor`'s memory (a contiguous CPU tensor): the
    buffer libkolo reads or writes. bfloat16, which NumPy lacks, is viewed as
    int16 of the same bytes (kolod is told the real dtype)."""
    t = tensor.detach()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy()


def _arena_tensor(shape, dtype):
    """A CPU tensor of `shape` and `dtype` in the session's shared-memory
    arena: collectives on it copy nothing between this process and kolod.
    None when the arena has no room (callers then use ordinary memory)."""
    try:
        buf = core.allocate(_DTYPE_CODES[dtype], [int(d) for d in shape])
    except KoloError:
        return None
    t = torch.from_numpy(np.asarray(buf))  # the array, and so `buf`, lives as long as t
    return t.view(torch.bfloat16) if dtype == torch.bfloat16 else t


def _check_tensor(tensor, what):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{what} takes a torch.Tensor, not {type(tensor).__name__}")
    if tensor.is_sparse:
        raise TypeError(f"{what} takes a dense tensor; DistributedOptimizer handles "
                        "sparse gradients (sparse_as_dense=True or allgather)")
    _code(tensor)


def _is_cuda(tensor):
    return tensor.device.type == "cuda"


def _stream(tensor):
    return torch.cuda.current_stream(tensor.device).cuda_stream


# kolo.torch's handles are the NumPy API's (kolo._shared.Handle), with the
# finish functions below.
Handle = _shared.Handle


class _Done:
    """A handle over other handles (`parts`) whose result `wait_fn` makes
    from theirs (a sparse allreduce: two allgathers, then a sum)."""

    def __init__(self, wait_fn, parts=()):
        self._wait_fn = wait_fn
        self.parts = list(parts)
        self._lock = threading.Lock()
        self._done, self._result, self._error = False, None, None

    def poll(self):
        return self._done or all(h.poll() for h in self.parts)

    def wait(self):
        with self._lock:
            if not self._done:
                try:
                    self._result = self._wait_fn()
                except Exception as e:  # noqa: BLE001
                    self._error = e
                finally:
                    self._done = True
            if self._error is not None:
                raise self._error
            return self._result


def poll(handle):
    """True once the collective behind `handle` completed."""
    return handle.poll()


def synchronize(handle):
    """Waits for `handle` and returns its collective's output tensor."""
    return handle.wait()


_wait_plain = _shared.finish_plain


def _wait_output(dtype, alltoall=False, device=None, splits_like=None):
    """Finishes an allgather/reducescatter/alltoall: the result is copied once
    from shared memory into a new tensor of `dtype` (alltoall's received
    splits take the dtype and device of `splits_like`, int32 without it)."""
    itemsize = dtype.itemsize

    def finish(hid):
        box = []

        def alloc(shape):
            box.append(torch.empty([int(d) for d in shape], dtype=dtype))
            return _host(box[0])

        splits = core.wait_output_into(hid, alltoall, itemsize, alloc)
        out = box[0] if box else torch.empty([0], dtype=dtype)
        if device is not None:
            out = out.to(device)
        if alltoall:
            if splits_like is not None:
                return out, torch.tensor(splits, dtype=splits_like.dtype,
                                         device=splits_like.device)
            return out, torch.tensor(splits, dtype=torch.int32)
        return out
    return finish
