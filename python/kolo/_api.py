"""The NumPy-level API of kolo (re-exported by the package): the lifecycle,
the job's shape, and the collectives on NumPy and CUDA arrays. What the
framework modules share with it (codes, process sets, names, CUDA views,
handles) is kolo._shared."""

import os

import numpy as np

from kolo import _timeline
from kolo._native import core
from kolo._shared import (  # noqa: F401  (public: kolo re-exports them)
    Handle, ProcessSet, ReduceOp, global_process_set,
)
from kolo._shared import (
    CudaView, GroupHandle, as_input, collective_name, compression_code, cuda_copy,
    dtype_code, dtype_codes, finish_alltoall, finish_output, finish_plain, group_names,
    is_cuda, op_code, ps_id,
)

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


# Adaptive summation: the ranks' tensors combined pairwise in a tree, each
# pair (a, b) as (1 - a.b/(2|a|^2)) a + (1 - a.b/(2|b|^2)) b, each tensor on
# its own (floating-point host tensors).
Adasum = ReduceOp.ADASUM


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

    KOLO_TIMELINE=<path> (or Horovod's HOROVOD_TIMELINE) in the environment
    starts the job's timeline here; shutdown() or interpreter exit writes it
    to <path> (see kolo._timeline)."""
    if comm is not None and comm != []:
        raise ValueError("Kolo's init takes no communicator: the job's ranks are the "
                         "processes kolorun started")
    init()
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
    if not is_cuda(tensor):
        if not isinstance(tensor, np.ndarray) or not tensor.flags.c_contiguous \
                or not tensor.flags.writeable:
            raise ValueError("allreduce_ needs a writable C-contiguous array")
        nm = collective_name("allreduce", name, process_set)
        code = dtype_code(tensor, "allreduce", nm, process_set)
        hid = core.allreduce_async(tensor, tensor, code, nm,
                                   op_code(op, average), float(prescale_factor),
                                   float(postscale_factor),
                                   compression_code(compression), ps_id(process_set))
        return Handle(hid, finish_plain(tensor), (tensor,))
    view = CudaView(tensor, device)
    hid = core.allreduce_device_async(view.data, view.shape, view.dtype_code, view.device,
                                      view.stream, collective_name("allreduce", name, process_set),
                                      op_code(op, average), float(prescale_factor),
                                      float(postscale_factor),
                                      compression_code(compression), ps_id(process_set))
    return Handle(hid, finish_plain(tensor), (tensor,))


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
    if is_cuda(tensor):
        return allreduce_async_(cuda_copy(tensor), average, name, op, prescale_factor,
                                postscale_factor, compression, process_set)
    inp = as_input(tensor)
    out = np.empty_like(inp)
    nm = collective_name("allreduce", name, process_set)
    code = dtype_code(inp, "allreduce", nm, process_set)
    hid = core.allreduce_async(inp, out, code, nm,
                               op_code(op, average), float(prescale_factor),
                               float(postscale_factor),
                               compression_code(compression), ps_id(process_set))
    return Handle(hid, finish_plain(out), (inp, out))


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
    if any(is_cuda(t) for t in tensors):
        if not all(is_cuda(t) for t in tensors):
            raise ValueError("grouped_allreduce: a group is all CUDA arrays or all host arrays")
        copies = [cuda_copy(t) for t in tensors]
        views = [CudaView(c) for c in copies]
        if len({v.device for v in views}) != 1 or len({v.stream for v in views}) != 1:
            raise ValueError("grouped_allreduce: the CUDA arrays of a group must be on one GPU "
                             "and one stream")
        names = group_names("grouped_allreduce", name, len(views), process_set)
        ids = core.grouped_allreduce_device_async(
            [v.data for v in views], [v.shape for v in views], [v.dtype_code for v in views],
            views[0].device, views[0].stream, names, op_code(op, average),
            float(prescale_factor), float(postscale_factor), compression_code(compression),
            ps_id(process_set))
        return GroupHandle([Handle(h, finish_plain(c), (c,))
                             for h, c in zip(ids, copies)])
    inputs = [as_input(t) for t in tensors]
    outputs = [np.empty_like(t) for t in inputs]
    names = group_names("grouped_allreduce", name, len(inputs), process_set)
    ids = core.grouped_allreduce_async(
        inputs, outputs, dtype_codes(inputs, "allreduce", names, process_set), names,
        op_code(op, average), float(prescale_factor), float(postscale_factor),
        compression_code(compression), ps_id(process_set))
    return GroupHandle([Handle(h, finish_plain(o), (i, o))
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
    if is_cuda(tensor):
        view = CudaView(tensor, device)
        nm = collective_name("broadcast", name, process_set)
        hid = core.broadcast_device_async(view.data, view.shape, view.dtype_code, view.device,
                                          view.stream, nm, int(root_rank), ps_id(process_set))
        return Handle(hid, finish_plain(tensor), (tensor,))
    if not isinstance(tensor, np.ndarray) or not tensor.flags.c_contiguous \
            or not tensor.flags.writeable:
        raise ValueError("broadcast_ needs a writable C-contiguous numpy array")
    nm = collective_name("broadcast", name, process_set)
    hid = core.broadcast_async(tensor, dtype_code(tensor, "broadcast", nm, process_set), nm,
                               int(root_rank), ps_id(process_set))
    return Handle(hid, finish_plain(tensor), (tensor,))


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts a broadcast from root_rank into a copy of `tensor`."""
    if is_cuda(tensor):
        return broadcast_async_(cuda_copy(tensor), root_rank, name, process_set)
    return broadcast_async_(np.array(tensor, copy=True, order="C"), root_rank,
                            name, process_set)


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """root_rank's `tensor`, on every rank, as a new array."""
    return broadcast_async(tensor, root_rank, name, process_set).wait()


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set, device=None):
    """Replaces `tensor` in place with root_rank's and returns it."""
    return broadcast_async_(tensor, root_rank, name, process_set, device).wait()


def allgather_async(tensor, name=None, process_set=global_process_set):
    inp = as_input(tensor)
    if inp.ndim == 0:
        inp = inp.reshape(1)
    nm = collective_name("allgather", name, process_set)
    hid = core.allgather_async(inp, dtype_code(inp, "allgather", nm, process_set), nm,
                               ps_id(process_set))
    return Handle(hid, finish_output(inp.dtype), (inp,))


def allgather(tensor, name=None, process_set=global_process_set):
    """Every rank's `tensor` concatenated along the first dimension, in rank
    order (the first dimension may differ per rank)."""
    return allgather_async(tensor, name, process_set).wait()


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    inputs = [as_input(t) for t in tensors]
    inputs = [t.reshape(1) if t.ndim == 0 else t for t in inputs]
    names = group_names("grouped_allgather", name, len(inputs), process_set)
    ids = core.grouped_allgather_async(inputs,
                                       dtype_codes(inputs, "allgather", names, process_set),
                                       names, ps_id(process_set))
    return GroupHandle([Handle(h, finish_output(t.dtype), (t,))
                         for h, t in zip(ids, inputs)])


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    return grouped_allgather_async(tensors, name, process_set).wait()


def reducescatter_async(tensor, name=None, op=Average, prescale_factor=1.0,
                        postscale_factor=1.0, process_set=global_process_set):
    inp = as_input(tensor)
    nm = collective_name("reducescatter", name, process_set)
    hid = core.reducescatter_async(inp, dtype_code(inp, "reducescatter", nm, process_set), nm,
                                   op_code(op), float(prescale_factor),
                                   float(postscale_factor), ps_id(process_set))
    return Handle(hid, finish_output(inp.dtype), (inp,))


def reducescatter(tensor, name=None, op=Average, prescale_factor=1.0,
                  postscale_factor=1.0, process_set=global_process_set):
    """This rank's block of rows of the reduction of `tensor` (op Sum or
    Average); lower ranks take one extra row when the rows do not divide."""
    return reducescatter_async(tensor, name, op, prescale_factor,
                               postscale_factor, process_set).wait()


def grouped_reducescatter_async(tensors, name=None, op=Average, prescale_factor=1.0,
                                postscale_factor=1.0, process_set=global_process_set):
    inputs = [as_input(t) for t in tensors]
    names = group_names("grouped_reducescatter", name, len(inputs), process_set)
    ids = core.grouped_reducescatter_async(
        inputs, dtype_codes(inputs, "reducescatter", names, process_set), names, op_code(op),
        float(prescale_factor), float(postscale_factor), ps_id(process_set))
    return GroupHandle([Handle(h, finish_output(t.dtype), (t,))
                         for h, t in zip(ids, inputs)])


def grouped_reducescatter(tensors, name=None, op=Average, prescale_factor=1.0,
                          postscale_factor=1.0, process_set=global_process_set):
    return grouped_reducescatter_async(tensors, name, op, prescale_factor,
                                       postscale_factor, process_set).wait()


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    inp = as_input(tensor)
    sp = [] if splits is None else [int(s) for s in np.asarray(splits).reshape(-1)]
    nm = collective_name("alltoall", name, process_set)
    hid = core.alltoall_async(inp, dtype_code(inp, "alltoall", nm, process_set), sp, nm,
                              ps_id(process_set))
    return Handle(hid, finish_alltoall(inp.dtype), (inp,))


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends splits[j] rows of `tensor` to rank j (even split when None) and
    returns (received rows in rank order, rows received from each rank)."""
    return alltoall_async(tensor, splits, name, process_set).wait()


def barrier(process_set=global_process_set):
    """Returns once every rank of the process set has called it."""
    core.barrier(ps_id(process_set))


def join():
    """Declares this rank out of data; returns the last rank to join once all
    have (meanwhile this rank contributes zeros to the others' allreduces)."""
    return core.join()


def add_process_set(ranks):
    """Registers a process set of global ranks (every rank of the job calls it
    with the same ranks, in the same order); returns the ProcessSet."""
    ps = ranks if isinstance(ranks, ProcessSet) else ProcessSet(ranks)
    ps._register(core.add_process_set(list(ps.ranks)))
    return ps


def remove_process_set(process_set):
    """Removes a process set (every rank of the job calls it). True once
    removed; False for a ProcessSet that is not registered (nothing to do).
    Other failures raise, as every collective does."""
    if isinstance(process_set, ProcessSet) and process_set.process_set_id is None:
        return False
    core.remove_process_set(ps_id(process_set))
    if isinstance(process_set, ProcessSet):
        process_set.process_set_id = None
    return True
