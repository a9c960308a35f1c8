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
from kolo.errors import AlreadyExistsError, KoloError

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
    from theirs (a sparse allreduce: two allgathers, then a sum). Calling it
    waits too, as horovod.torch's sparse_allreduce_async handle (a function)
    is called; synchronize() and poll() take it like any handle."""

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

    __call__ = wait


def poll(handle):
    """True once the collective behind `handle` completed."""
    return handle.poll()


def synchronize(handle):
    """Waits for `handle` and returns its collective's output tensor."""
    return handle.wait()


_wait_plain = _shared.finish_plain


class DuplicateNameError(AlreadyExistsError, ValueError):
    """A collective submitted under a name this rank's earlier collective of
    the same process set still holds (not completed): raised at the
    submission, on the submitting rank, as horovod.torch raises ValueError."""


# Horovod refuses a name while its collective is in flight. Here a name a
# caller gave is held by the handle of this rank's last collective under it
# ((process set id, name) -> (submission number, handle)) until that handle
# is waited for, or it completed and this rank submitted something else since:
# kolod may finish a collective before its rank submits the next call, so
# without the second rule a name submitted twice in a row would pass when the
# first happened to complete in between. Unnamed collectives get fresh names.
_named = {}
_named_lock = threading.Lock()
_SWEEP_AT = [1024]
_submitted = [0]


def _completed(handle):
    try:
        return handle.poll()
    except KoloError:  # a session that ended: its collectives are over
        return True


def moved_on():
    """This rank submitted a collective (a name completed before it is free)."""
    with _named_lock:
        _submitted[0] += 1


def forget_names():
    """A new session (init after shutdown, an elastic epoch) holds no name."""
    with _named_lock:
        _named.clear()


def claim_name(kind, name, process_set):
    """Before submitting: raises DuplicateNameError where `name` (given by
    the caller; None needs no check) is still in flight on this rank. Returns
    what to pass the new handle through so that it holds the name."""
    if name is None:
        moved_on()
        return _unnamed
    key = (_shared.ps_id(process_set), str(name), _epoch())
    with _named_lock:
        seq, held = _named.get(key, (None, None))
        last = _submitted[0]
    if held is not None and not getattr(held, "_done", False) and (
            not _completed(held) or seq == last):
        raise DuplicateNameError(
            f'{kind} "{name}": rank {core.rank()} submitted this name again while it is '
            "still in flight")
    moved_on()

    def hold(handle):
        with _named_lock:
            _named[key] = (_submitted[0], handle)
            if len(_named) >= _SWEEP_AT[0]:
                for k in [k for k, (_, h) in _named.items() if getattr(h, "_done", False)]:
                    del _named[k]
                _SWEEP_AT[0] = max(1024, 2 * len(_named))
        return handle
    return hold


def _epoch():
    try:
        return core.epoch()
    except KoloError:
        return None


def _unnamed(handle):
    return handle


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
