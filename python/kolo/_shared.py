"""What the NumPy API (kolo._api), kolo.torch and kolo.tensorflow share
beneath their public functions: kolod's codes (dtypes, collective kinds,
reduction ops, compression), process sets and the names of collectives,
CUDA arrays seen through __cuda_array_interface__, and the handles a
submitted collective returns.

The codes come from kolo._core, which reads them from
proto/kolo/abi/types.h: Python never writes one itself. Nothing here
imports another kolo module but kolo._native and kolo.errors, so every
module above may import this one.
"""

import enum
import itertools
import threading

import numpy as np

from kolo import errors
from kolo._native import core

# ---------------------------------------------------------------- codes

# kolo::DType by name, in code order (NumPy's dtype names; bool is one byte,
# True when not zero: reductions of it give False/True, sum and max are a
# logical or, product and min a logical and; it has no average and takes no
# scale factor).
DTYPE_CODES = dict(core.DTYPES)

# kolo::CollectiveKind by name (the kinds a rank can refuse among them).
KIND_CODES = dict(core.KINDS)


class ReduceOp(enum.IntEnum):
    """How allreduce and reducescatter combine the ranks' tensors (the
    values of kolo::ReduceOp, core.REDUCE_OPS)."""

    SUM = core.REDUCE_OPS["sum"]
    AVERAGE = core.REDUCE_OPS["average"]
    MIN = core.REDUCE_OPS["min"]
    MAX = core.REDUCE_OPS["max"]
    PRODUCT = core.REDUCE_OPS["product"]
    ADASUM = core.REDUCE_OPS["adasum"]


def op_code(op, average=None):
    """kolod's code of reduction `op` (None: Average, or Sum when the
    deprecated `average` is False)."""
    if op is None:
        if average is None or average:
            return int(ReduceOp.AVERAGE)
        return int(ReduceOp.SUM)
    if average is not None:
        raise ValueError("give either op or the deprecated average, not both")
    return int(ReduceOp(int(op)))


def compression_code(compression):
    """kolod's code of a wire format of float32 allreduce data (an object
    with a `code`, or the code itself; None: as is)."""
    if compression is None:
        return 0
    code = getattr(compression, "code", compression)
    if code not in (0, 1, 2):
        raise ValueError(f"unknown compression {compression!r}")
    return int(code)


def unsupported_dtype(name, framework="kolo"):
    """The TypeError for an element type kolod has no code for."""
    return TypeError(f"{framework} does not support dtype {name}; supported: "
                     + ", ".join(DTYPE_CODES))


def refuse(kind, names, process_set, why):
    """Tells the other ranks that this rank will not take part in the
    collectives `names` of `kind` (a check here refused them for `why`): kolod
    fails them on every rank with this reason instead of leaving the others
    waiting. Best effort: without kolod the caller's own error still stands."""
    for name in names:
        try:
            core.refuse(KIND_CODES[kind], name, ps_id(process_set), str(why))
        except errors.KoloError:
            return


def dtype_code(array, kind=None, name=None, process_set=None):
    """Kolo's code for `array`'s dtype. TypeError when it has none, after
    refusing the collective `name` of `kind` (when given) on every rank."""
    return dtype_codes([array], kind, None if name is None else [name], process_set)[0]


def dtype_codes(arrays, kind=None, names=None, process_set=None):
    """The codes of several arrays, for one collective or one group: an array
    without one refuses every name given (a group fails as a whole)."""
    codes = []
    for array in arrays:
        code = DTYPE_CODES.get(array.dtype.name)
        if code is None:
            why = unsupported_dtype(array.dtype.name)
            if kind is not None and names:
                refuse(kind, names, process_set, why)
            raise why
        codes.append(code)
    return codes


def as_input(tensor):
    """`tensor` as a C-contiguous NumPy array (copied only where needed)."""
    return np.ascontiguousarray(tensor)


# ---------------------------------------------------------------- CUDA arrays

class CudaView:
    """A C-contiguous CUDA array seen through its __cuda_array_interface__
    (PyTorch CUDA tensors, CuPy and Numba arrays): kolod reads and writes its
    memory through CUDA IPC, ordered with the array's stream."""

    def __init__(self, array, device=None):
        iface = array.__cuda_array_interface__
        self.array = array
        self.shape = [int(d) for d in iface["shape"]]
        typestr = iface["typestr"]
        try:
            dtype = np.dtype(typestr)
        except TypeError:
            raise TypeError(f"kolo does not support CUDA arrays of type {typestr}") from None
        self.dtype_code = DTYPE_CODES.get(dtype.name)
        if self.dtype_code is None:
            raise unsupported_dtype(dtype.name)
        strides = iface.get("strides")
        if strides is not None:
            expect = dtype.itemsize
            for dim, stride in zip(reversed(self.shape), reversed(list(strides))):
                if dim > 1 and stride != expect:
                    raise ValueError("kolo needs a C-contiguous CUDA array")
                expect *= dim
        self.data, readonly = iface["data"]
        if readonly:
            raise ValueError("kolo writes CUDA arrays in place: this one is read-only")
        # Version 3: None means the data is ready; 1 and 2 are CUDA's
        # legacy and per-thread default streams; else a cudaStream_t.
        self.stream = int(iface.get("stream") or 0)
        self.device = cuda_device(array) if device is None else int(device)


def cuda_device(array):
    """The CUDA ordinal of the GPU that holds `array`."""
    dev = getattr(array, "device", None)
    for attr in ("index", "id"):  # torch.device.index, cupy.cuda.Device.id
        value = getattr(dev, attr, None)
        if isinstance(value, int):
            return value
    raise ValueError("cannot tell which GPU holds this CUDA array; pass device=")


def is_cuda(tensor):
    """Whether `tensor` is a CUDA array (has __cuda_array_interface__)."""
    return hasattr(tensor, "__cuda_array_interface__")


def cuda_copy(tensor):
    """A new CUDA array equal to `tensor` (clone() for PyTorch, copy() else)."""
    for method in ("clone", "copy"):
        fn = getattr(tensor, method, None)
        if callable(fn):
            return fn()
    raise TypeError(f"cannot copy a {type(tensor).__name__}; use the in-place form")


# ---------------------------------------------------------------- process sets

class ProcessSet:
    """A subset of the job's ranks that collectives can run on.

    Create it with add_process_set (every rank of the job calls it with the
    same ranks); pass it as `process_set=` to any collective."""

    def __init__(self, ranks, process_set_id=None):
        self.ranks = sorted(int(r) for r in ranks) if ranks is not None else None
        self.process_set_id = process_set_id
        self._epoch = None  # the elastic epoch add_process_set registered it in

    def included(self):
        """Whether this process belongs to the set."""
        return self.ranks is None or core.rank() in self.ranks

    def rank(self):
        return core.process_set_rank(self._id())

    def size(self):
        return core.process_set_size(self._id())

    def _register(self, process_set_id):
        """Takes the id kolod gave this set in the current elastic epoch."""
        self.process_set_id = process_set_id
        self._epoch = core.epoch()

    def _id(self):
        if self.process_set_id is None:
            raise ValueError("process set was not registered with add_process_set")
        if self._epoch is not None and self._epoch != core.epoch():
            # The next epoch numbers its sets afresh: this id may be another
            # set's now.
            raise ValueError(
                f"process set of ranks {self.ranks} belonged to an elastic epoch that "
                "ended: process sets are per epoch; add it again with add_process_set "
                "(in a reset callback)")
        return self.process_set_id

    def __repr__(self):
        return f"ProcessSet(id={self.process_set_id}, ranks={self.ranks})"


global_process_set = ProcessSet(None, 0)


def ps_id(process_set):
    """kolod's id of `process_set` (a ProcessSet, an id, or None: global)."""
    if process_set is None:
        return 0
    if isinstance(process_set, ProcessSet):
        return process_set._id()
    return int(process_set)


def ps_size(process_set):
    """The number of ranks in `process_set` (the job's for the global set)."""
    ps = ps_id(process_set)
    return core.size() if ps == 0 else core.process_set_size(ps)


def ps_rank(process_set):
    """This rank's position in `process_set` (the order of its results)."""
    ps = ps_id(process_set)
    return core.rank() if ps == 0 else core.process_set_rank(ps)


# Names identify collectives across ranks: an unnamed one gets the next number
# of its kind within its process set, the same on every member rank that makes
# the same calls in order (ranks outside a set do not advance its numbers).
_counters = {}
_counters_lock = threading.Lock()


def collective_name(kind, name, process_set=None):
    """`name`, or the next unnamed collective's of `kind` in `process_set`."""
    if name is not None:
        return str(name)
    ps = ps_id(process_set)
    with _counters_lock:
        counter = _counters.setdefault((kind, ps), itertools.count())
        n = next(counter)
    return f"{kind}.noname.{n}" if ps == 0 else f"{kind}.ps{ps}.noname.{n}"


def group_names(kind, name, n, process_set=None):
    """The names of a group's `n` collectives: its own name, then .0, .1, ..."""
    base = collective_name(kind, name, process_set)
    return [f"{base}.{i}" for i in range(n)]


def reset_names():
    """Unnamed collectives count from zero again (an elastic job's new epoch:
    its joiners start from zero too)."""
    with _counters_lock:
        _counters.clear()


# ---------------------------------------------------------------- handles

# The arrays of every collective not yet waited for, by handle id: kolod and
# libkolo may still read or write them, so they live until the wait even if
# the caller drops its handle (an unwaited handle keeps them for good).
inflight = {}
_inflight_lock = threading.Lock()


def _hold(hid, keep):
    with _inflight_lock:
        inflight[hid] = keep


def _release(hid):
    with _inflight_lock:
        inflight.pop(hid, None)


class Handle:
    """A submitted collective. wait() blocks and returns its result (raising
    its error, again on every wait); poll() tells whether it completed.
    `finish(hid)` waits for the collective and makes its result; the buffers
    in `keep` stay alive until it is waited for. kolo.torch's handles are
    these too, with their own `finish`."""

    def __init__(self, hid, finish, keep):
        self._id = hid
        self._finish = finish
        _hold(hid, keep)
        self._done = False
        self._result = None
        self._error = None
        self._lock = threading.Lock()

    def poll(self):
        """True once the collective completed (wait() then returns at once)."""
        with self._lock:
            return self._done or core.test(self._id)

    def wait(self):
        with self._lock:
            if not self._done:
                try:
                    self._result = self._finish(self._id)
                except Exception as e:  # noqa: BLE001 - raised again on every wait
                    self._error = e
                finally:
                    self._done = True
                    self._finish = None
                    _release(self._id)
            if self._error is not None:
                raise self._error
            return self._result


class GroupHandle:
    """The handles of one grouped collective; wait() returns their results."""

    def __init__(self, handles):
        self._handles = handles

    @property
    def parts(self):
        """The handles of the group's collectives, in order."""
        return self._handles

    def poll(self):
        return all(h.poll() for h in self._handles)

    def wait(self):
        results, first_error = [], None
        for h in self._handles:
            try:
                results.append(h.wait())
            except Exception as e:  # noqa: BLE001 - every handle is waited for
                first_error = first_error or e
                results.append(None)
        if first_error is not None:
            raise first_error
        return results


def finish_plain(result, after=None):
    """Finishes a collective that writes into a buffer the caller passed:
    its result is that buffer, after `after()` (kolo.torch copies a staged
    output back with it)."""
    def finish(hid):
        core.wait(hid)
        if after is not None:
            after()
        return result
    return finish


def finish_output(dtype):
    """Finishes an allgather/reducescatter: a new array of `dtype`."""
    def finish(hid):
        data, shape = core.wait_output(hid, dtype.itemsize)
        return to_array(data, shape, dtype)
    return finish


def finish_alltoall(dtype):
    """Finishes an alltoall: a new array of `dtype` and the received splits."""
    def finish(hid):
        data, shape, splits = core.wait_alltoall(hid, dtype.itemsize)
        return to_array(data, shape, dtype), np.asarray(splits, dtype=np.int64)
    return finish


def to_array(data, shape, dtype):
    """A NumPy array of `dtype` and `shape`, copied from kolod's bytes."""
    return np.frombuffer(data, dtype=dtype).reshape(shape).copy()
