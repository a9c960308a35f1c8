"""The NumPy-level API of kolo (re-exported by the package)."""

import enum
import itertools
import os
import threading

import numpy as np

from kolo import errors
from kolo._native import core


class ReduceOp(enum.IntEnum):
    """How allreduce and reducescatter combine the ranks' tensors."""

    SUM = 0
    AVERAGE = 1
    MIN = 2
    MAX = 3
    PRODUCT = 4


Sum = ReduceOp.SUM
Average = ReduceOp.AVERAGE
Min = ReduceOp.MIN
Max = ReduceOp.MAX
Product = ReduceOp.PRODUCT


class _Codec:
    """A wire format of float32 allreduce data (see Compression)."""

    def __init__(self, name, code):
        self.name, self.code = name, code

    def __repr__(self):
        return f"Compression.{self.name}"


class Compression:
    """How float32 allreduce data travels: `none` as is, `fp16`/`bf16`
    rounded to 16 bits (the reduction still accumulates in float32)."""

    none = _Codec("none", 0)
    fp16 = _Codec("fp16", 1)
    bf16 = _Codec("bf16", 2)


# NumPy's dtype names (bool is one byte, True when not zero: reductions of it
# give False/True, sum and max are a logical or, product and min a logical
# and; it has no average and takes no scale factor).
_DTYPE_CODES = {
    "uint8": 0, "int8": 1, "int32": 2, "int64": 3,
    "float16": 4, "bfloat16": 5, "float32": 6, "float64": 7,
    "int16": 8, "bool": 9, "uint16": 10,
}


# kolo::CollectiveKind of the collectives a rank can refuse (see _refuse).
_KIND_CODES = {"allreduce": 1, "broadcast": 2, "allgather": 3, "reducescatter": 4,
               "alltoall": 5}


def _refuse(kind, names, process_set, why):
    """Tells the other ranks that this rank will not take part in the
    collectives `names` of `kind` (a check here refused them for `why`): kolod
    fails them on every rank with this reason instead of leaving the others
    waiting. Best effort: without kolod the caller's own error still stands."""
    for name in names:
        try:
            core.refuse(_KIND_CODES[kind], name, _ps_id(process_set), str(why))
        except errors.KoloError:
            return


def _dtype_code(array, kind=None, name=None, process_set=None):
    """Kolo's code for `array`'s dtype. TypeError when it has none, after
    refusing the collective `name` of `kind` (when given) on every rank."""
    return _dtype_codes([array], kind, None if name is None else [name], process_set)[0]


def _dtype_codes(arrays, kind=None, names=None, process_set=None):
    """The codes of several arrays, for one collective or one group: an array
    without one refuses every name given (a group fails as a whole)."""
    codes = []
    for array in arrays:
        code = _DTYPE_CODES.get(array.dtype.name)
        if code is None:
            why = TypeError(f"kolo does not support dtype {array.dtype.name}; supported: "
                            + ", ".join(_DTYPE_CODES))
            if kind is not None and names:
                _refuse(kind, names, process_set, why)
            raise why
        codes.append(code)
    return codes


def _as_input(tensor):
    return np.ascontiguousarray(tensor)


class _CudaView:
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
        self.dtype_code = _DTYPE_CODES.get(dtype.name)
        if self.dtype_code is None:
            raise TypeError(f"kolo does not support dtype {dtype.name}; supported: "
                            + ", ".join(_DTYPE_CODES))
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
        self.device = _cuda_device(array) if device is None else int(device)


def _cuda_device(array):
    dev = getattr(array, "device", None)
    for attr in ("index", "id"):  # torch.device.index, cupy.cuda.Device.id
        value = getattr(dev, attr, None)
        if isinstance(value, int):
            return value
    raise ValueError("cannot tell which GPU holds this CUDA array; pass device=")


def _is_cuda(tensor):
    return hasattr(tensor, "__cuda_array_interface__")


def _cuda_copy(tensor):
    """A new CUDA array equal to `tensor` (clone() for PyTorch, copy() else)."""
    for method in ("clone", "copy"):
        fn = getattr(tensor, method, None)
        if callable(fn):
            return fn()
    raise TypeError(f"cannot copy a {type(tensor).__name__}; use the in-place form")


def _op_code(op, average=None):
    if op is None:
        if average is None or average:
            return int(ReduceOp.AVERAGE)
        return int(ReduceOp.SUM)
    if average is not None:
        raise ValueError("give either op or the deprecated average, not both")
    return int(ReduceOp(int(op)))


def _compression_code(compression):
    if compression is None:
        return 0
    code = getattr(compression, "code", compression)
    if code not in (0, 1, 2):
        raise ValueError(f"unknown compression {compression!r}")
    return int(code)


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
        return self.ranks is None or rank() in self.ranks

    def rank(self):
        return core.process_set_rank(self._id())

    def size(self):
        return core.process_set_size(self._id())

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


def _ps_id(process_set):
    if process_set is None:
        return 0
    if isinstance(process_set, ProcessSet):
        return process_set._id()
    return int(process_set)


def _ps_size(process_set):
    """The number of ranks in `process_set` (the job's for the global set)."""
    ps = _ps_id(process_set)
    return core.size() if ps == 0 else core.process_set_size(ps)


def _ps_rank(process_set):
    """This rank's position in `process_set` (the order of its results)."""
    ps = _ps_id(process_set)
    return core.rank() if ps == 0 else core.process_set_rank(ps)


# Names identify collectives across ranks: an unnamed one gets the next number
# of its kind within its process set, the same on every member rank that makes
# the same calls in order (ranks outside a set do not advance its numbers).
_counters = {}
_counters_lock = threading.Lock()


def _name(kind, name, process_set=None):
    if name is not None:
        return str(name)
    ps = _ps_id(process_set)
    with _counters_lock:
        counter = _counters.setdefault((kind, ps), itertools.count())
        n = next(counter)
    return f"{kind}.noname.{n}" if ps == 0 else f"{kind}.ps{ps}.noname.{n}"


def _reset_names():
    """Unnamed collectives count from zero again (an elastic job's new epoch:
    its joiners start from zero too)."""
    with _counters_lock:
        _counters.clear()


class _Unsupported:
    """A reduction op Kolo does not implement: using it raises
    NotImplementedError with the reason."""

    def __init__(self, name, why):
        self.name, self.why = name, why

    def __int__(self):
        raise NotImplementedError(f"{self.name}: {self.why}")

    def __repr__(self):
        return self.name


Adasum = _Unsupported(
    "Adasum", "Kolo does not implement the Adasum reduction; use op=Average (the default) "
    "or op=Sum")


# ---------------------------------------------------------------- lifecycle

def init():
    """Attaches this process to kolod as the rank its KOLO_* environment names
    (a job of one rank without it). Safe to call twice."""
    core.init()


def init_job(comm=None, process_sets=None):
    """init() for the framework modules, with horovod's arguments: registers
    `process_sets` (ProcessSet objects, the same list on every rank; None or
    "dynamic" registers none, add_process_set works at any time). `comm` (an
    MPI communicator elsewhere) must be None: kolorun and kolod define the
    job.

    KOLO_TIMELINE=<path> in the environment (horovod's HOROVOD_TIMELINE)
    starts the job's timeline here; shutdown() or interpreter exit writes it
    to <path> (see kolo._timeline)."""
    if comm is not None and comm != []:
        raise ValueError("Kolo's init takes no communicator: the job's ranks are the "
                         "processes kolorun started")
    init()
    from kolo import _timeline  # it uses this module
    _timeline.at_init(os.environ)
    if process_sets is None or process_sets == "dynamic":
        return
    for ps in process_sets:
        if not isinstance(ps, ProcessSet):
            raise TypeError(f"process_sets takes ProcessSet objects, not {type(ps).__name__}")
        if ps.process_set_id is None:
            add_process_set(ps)


def shutdown():
    """Detaches from kolod; pending collectives fail with CancelledError. A
    job timeline still recording (start_timeline, KOLO_TIMELINE) is stopped
    and written first."""
    from kolo import _timeline  # it uses this module
    _timeline.at_shutdown()
    core.shutdown()


def is_initialized():
    return core.is_initialized()


def rank():
    return core.rank()


def size():
    return core.size()


def local_rank():
    return core.local_rank()


def local_size():
    return core.local_size()


# ---------------------------------------------------------------- handles

# The arrays of every collective not yet waited for, by handle id: kolod and
# libkolo may still read or write them, so they live until the wait even if
# the caller drops its handle (an unwaited handle keeps them for good).
_inflight = {}
_inflight_lock = threading.Lock()


def _hold(hid, keep):
    with _inflight_lock:
        _inflight[hid] = keep


def _release(hid):
    with _inflight_lock:
        _inflight.pop(hid, None)


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


def _finish_plain(result, after=None):
    """Finishes a collective that writes into a buffer the caller passed:
    its result is that buffer, after `after()` (kolo.torch copies a staged
    output back with it)."""
    def finish(hid):
        core.wait(hid)
        if after is not None:
            after()
        return result
    return finish


def _finish_output(dtype):
    """Finishes an allgather/reducescatter: a new array of `dtype`."""
    def finish(hid):
        data, shape = core.wait_output(hid, dtype.itemsize)
        return _to_array(data, shape, dtype)
    return finish


def _finish_alltoall(dtype):
    """Finishes an alltoall: a new array of `dtype` and the received splits."""
    def finish(hid):
        data, shape, splits = core.wait_alltoall(hid, dtype.itemsize)
        return _to_array(data, shape, dtype), np.asarray(splits, dtype=np.int64)
    return finish


def _to_array(data, shape, dtype):
    return np.frombuffer(data, dtype=dtype).reshape(shape).copy()


class _GroupHandle:
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


def poll(handle):
    return handle.poll()


def synchronize(handle):
    """Waits for `handle` and returns its collective's result."""
    return handle.wait()


# ---------------------------------------------------------------- collectives

def allreduce_async_(tensor, average=None, name=None, op=None,
                     prescale_factor=1.0, postscale_factor=1.0,
                     compression=Compression.none, process_set=global_process_set,
                     device=None):
    """Starts reducing `tensor` in place across the ranks (default op:
    Average); wait() returns it. A CUDA array (one with
    __cuda_array_interface__: PyTorch, CuPy, Numba) is reduced on its GPU by
    kolod, ordered with the array's stream; `device` names its CUDA ordinal
    where the array does not tell."""
    if not _is_cuda(tensor):
        if not isinstance(tensor, np.ndarray) or not tensor.flags.c_contiguous \
                or not tensor.flags.writeable:
            raise ValueError("allreduce_ needs a writable C-contiguous array")
        nm = _name("allreduce", name, process_set)
        code = _dtype_code(tensor, "allreduce", nm, process_set)
        hid = core.allreduce_async(tensor, tensor, code, nm,
                                   _op_code(op, average), float(prescale_factor),
                                   float(postscale_factor),
                                   _compression_code(compression), _ps_id(process_set))
        return Handle(hid, _finish_plain(tensor), (tensor,))
    view = _CudaView(tensor, device)
    hid = core.allreduce_device_async(view.data, view.shape, view.dtype_code, view.device,
                                      view.stream, _name("allreduce", name, process_set),
                                      _op_code(op, average), float(prescale_factor),
                                      float(postscale_factor),
                                      _compression_code(compression), _ps_id(process_set))
    return Handle(hid, _finish_plain(tensor), (tensor,))


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, compression=Compression.none,
               process_set=global_process_set, device=None):
    """Reduces `tensor` in place over the ranks and returns it."""
    return allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor,
                            compression, process_set, device).wait()


def allreduce_async(tensor, average=None, name=None, op=None,
                    prescale_factor=1.0, postscale_factor=1.0,
                    compression=Compression.none, process_set=global_process_set):
    """Starts reducing `tensor` across the ranks (default op: Average)."""
    if _is_cuda(tensor):
        return allreduce_async_(_cuda_copy(tensor), average, name, op, prescale_factor,
                                postscale_factor, compression, process_set)
    inp = _as_input(tensor)
    out = np.empty_like(inp)
    nm = _name("allreduce", name, process_set)
    code = _dtype_code(inp, "allreduce", nm, process_set)
    hid = core.allreduce_async(inp, out, code, nm,
                               _op_code(op, average), float(prescale_factor),
                               float(postscale_factor),
                               _compression_code(compression), _ps_id(process_set))
    return Handle(hid, _finish_plain(out), (inp, out))


def allreduce(tensor, average=None, name=None, op=None, prescale_factor=1.0,
              postscale_factor=1.0, compression=Compression.none,
              process_set=global_process_set):
    """The reduction of `tensor` over the ranks, as a new array."""
    return allreduce_async(tensor, average, name, op, prescale_factor,
                           postscale_factor, compression, process_set).wait()


def grouped_allreduce_async(tensors, average=None, name=None, op=None,
                            prescale_factor=1.0, postscale_factor=1.0,
                            compression=Compression.none,
                            process_set=global_process_set):
    """Starts reducing several tensors negotiated and fused as one unit.
    CUDA arrays (all on one GPU, one stream) are reduced there by kolod."""
    if any(_is_cuda(t) for t in tensors):
        if not all(_is_cuda(t) for t in tensors):
            raise ValueError("grouped_allreduce: a group is all CUDA arrays or all host arrays")
        copies = [_cuda_copy(t) for t in tensors]
        views = [_CudaView(c) for c in copies]
        if len({v.device for v in views}) != 1 or len({v.stream for v in views}) != 1:
            raise ValueError("grouped_allreduce: the CUDA arrays of a group must be on one GPU "
                             "and one stream")
        base = _name("grouped_allreduce", name, process_set)
        names = [f"{base}.{i}" for i in range(len(views))]
        ids = core.grouped_allreduce_device_async(
            [v.data for v in views], [v.shape for v in views], [v.dtype_code for v in views],
            views[0].device, views[0].stream, names, _op_code(op, average),
            float(prescale_factor), float(postscale_factor), _compression_code(compression),
            _ps_id(process_set))
        return _GroupHandle([Handle(h, _finish_plain(c), (c,))
                             for h, c in zip(ids, copies)])
    inputs = [_as_input(t) for t in tensors]
    outputs = [np.empty_like(t) for t in inputs]
    base = _name("grouped_allreduce", name, process_set)
    names = [f"{base}.{i}" for i in range(len(inputs))]
    ids = core.grouped_allreduce_async(
        inputs, outputs, _dtype_codes(inputs, "allreduce", names, process_set), names,
        _op_code(op, average), float(prescale_factor), float(postscale_factor),
        _compression_code(compression), _ps_id(process_set))
    return _GroupHandle([Handle(h, _finish_plain(o), (i, o))
                         for h, i, o in zip(ids, inputs, outputs)])


def grouped_allreduce(tensors, average=None, name=None, op=None,
                      prescale_factor=1.0, postscale_factor=1.0,
                      compression=Compression.none, process_set=global_process_set):
    return grouped_allreduce_async(tensors, average, name, op, prescale_factor,
                                   postscale_factor, compression, process_set).wait()


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set,
                     device=None):
    """Starts replacing `tensor` (a writable C-contiguous array, or a CUDA
    array as for allreduce_async_) in place with root_rank's; wait() returns
    it."""
    if _is_cuda(tensor):
        view = _CudaView(tensor, device)
        hid = core.broadcast_device_async(view.data, view.shape, view.dtype_code, view.device,
                                          view.stream, _name("broadcast", name, process_set),
                                          int(root_rank), _ps_id(process_set))
        return Handle(hid, _finish_plain(tensor), (tensor,))
    if not isinstance(tensor, np.ndarray) or not tensor.flags.c_contiguous \
            or not tensor.flags.writeable:
        raise ValueError("broadcast_ needs a writable C-contiguous numpy array")
    nm = _name("broadcast", name, process_set)
    hid = core.broadcast_async(tensor, _dtype_code(tensor, "broadcast", nm, process_set), nm,
                               int(root_rank), _ps_id(process_set))
    return Handle(hid, _finish_plain(tensor), (tensor,))


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts a broadcast from root_rank into a copy of `tensor`."""
    if _is_cuda(tensor):
        return broadcast_async_(_cuda_copy(tensor), root_rank, name, process_set)
    return broadcast_async_(np.array(tensor, copy=True, order="C"), root_rank,
                            name, process_set)


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """root_rank's `tensor`, on every rank, as a new array."""
    return broadcast_async(tensor, root_rank, name, process_set).wait()


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set, device=None):
    """Replaces `tensor` in place with root_rank's and returns it."""
    return broadcast_async_(tensor, root_rank, name, process_set, device).wait()


def allgather_async(tensor, name=None, process_set=global_process_set):
    inp = _as_input(tensor)
    if inp.ndim == 0:
        inp = inp.reshape(1)
    nm = _name("allgather", name, process_set)
    hid = core.allgather_async(inp, _dtype_code(inp, "allgather", nm, process_set), nm,
                               _ps_id(process_set))
    return Handle(hid, _finish_output(inp.dtype), (inp,))


def allgather(tensor, name=None, process_set=global_process_set):
    """Every rank's `tensor` concatenated along the first dimension, in rank
    order (the first dimension may differ per rank)."""
    return allgather_async(tensor, name, process_set).wait()


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    inputs = [_as_input(t) for t in tensors]
    inputs = [t.reshape(1) if t.ndim == 0 else t for t in inputs]
    base = _name("grouped_allgather", name, process_set)
    names = [f"{base}.{i}" for i in range(len(inputs))]
    ids = core.grouped_allgather_async(inputs,
                                       _dtype_codes(inputs, "allgather", names, process_set),
                                       names, _ps_id(process_set))
    return _GroupHandle([Handle(h, _finish_output(t.dtype), (t,))
                         for h, t in zip(ids, inputs)])


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    return grouped_allgather_async(tensors, name, process_set).wait()


def reducescatter_async(tensor, name=None, op=Average, prescale_factor=1.0,
                        postscale_factor=1.0, process_set=global_process_set):
    inp = _as_input(tensor)
    nm = _name("reducescatter", name, process_set)
    hid = core.reducescatter_async(inp, _dtype_code(inp, "reducescatter", nm, process_set), nm,
                                   _op_code(op), float(prescale_factor),
                                   float(postscale_factor), _ps_id(process_set))
    return Handle(hid, _finish_output(inp.dtype), (inp,))


def reducescatter(tensor, name=None, op=Average, prescale_factor=1.0,
                  postscale_factor=1.0, process_set=global_process_set):
    """This rank's block of rows of the reduction of `tensor` (op Sum or
    Average); lower ranks take one extra row when the rows do not divide."""
    return reducescatter_async(tensor, name, op, prescale_factor,
                               postscale_factor, process_set).wait()


def grouped_reducescatter_async(tensors, name=None, op=Average, prescale_factor=1.0,
                                postscale_factor=1.0, process_set=global_process_set):
    inputs = [_as_input(t) for t in tensors]
    base = _name("grouped_reducescatter", name, process_set)
    names = [f"{base}.{i}" for i in range(len(inputs))]
    ids = core.grouped_reducescatter_async(
        inputs, _dtype_codes(inputs, "reducescatter", names, process_set), names, _op_code(op),
        float(prescale_factor), float(postscale_factor), _ps_id(process_set))
    return _GroupHandle([Handle(h, _finish_output(t.dtype), (t,))
                         for h, t in zip(ids, inputs)])


def grouped_reducescatter(tensors, name=None, op=Average, prescale_factor=1.0,
                          postscale_factor=1.0, process_set=global_process_set):
    return grouped_reducescatter_async(tensors, name, op, prescale_factor,
                                       postscale_factor, process_set).wait()


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    inp = _as_input(tensor)
    sp = [] if splits is None else [int(s) for s in np.asarray(splits).reshape(-1)]
    nm = _name("alltoall", name, process_set)
    hid = core.alltoall_async(inp, _dtype_code(inp, "alltoall", nm, process_set), sp, nm,
                              _ps_id(process_set))
    return Handle(hid, _finish_alltoall(inp.dtype), (inp,))


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends splits[j] rows of `tensor` to rank j (even split when None) and
    returns (received rows in rank order, rows received from each rank)."""
    return alltoall_async(tensor, splits, name, process_set).wait()


def barrier(process_set=global_process_set):
    """Returns once every rank of the process set has called it."""
    core.barrier(_ps_id(process_set))


def join():
    """Declares this rank out of data; returns the last rank to join once all
    have (meanwhile this rank contributes zeros to the others' allreduces)."""
    return core.join()


def add_process_set(ranks):
    """Registers a process set of global ranks (every rank of the job calls it
    with the same ranks, in the same order); returns the ProcessSet."""
    ps = ranks if isinstance(ranks, ProcessSet) else ProcessSet(ranks)
    ps.process_set_id = core.add_process_set(list(ps.ranks))
    ps._epoch = core.epoch()
    return ps


def remove_process_set(process_set):
    """Removes a process set (every rank of the job calls it). True once
    removed; False for a ProcessSet that is not registered (nothing to do).
    Other failures raise, as every collective does."""
    if isinstance(process_set, ProcessSet) and process_set.process_set_id is None:
        return False
    core.remove_process_set(_ps_id(process_set))
    if isinstance(process_set, ProcessSet):
        process_set.process_set_id = None
    return True
