"""Kolo's collectives on torch tensors, with horovod.torch's signatures.

CPU tensors: kolo reads and writes the tensor's own memory (a NumPy view of
it, no copy) and libkolo moves the bytes through the session's shared memory:
one copy in, one copy out, and results of allgather, reducescatter and
alltoall are copied once from shared memory into a new tensor. A
non-contiguous tensor is made contiguous first (one more copy, and one back
for the in-place forms).

CUDA tensors: allreduce (grouped: one fused device response), broadcast, and
for the global process set allgather and reducescatter run on the GPU in
kolod (CUDA IPC, ordered with the tensor's current stream); an allgather
first allgathers the ranks' row counts on the host, at the call, to allocate
its output on the GPU, so ranks start their CUDA allgathers in the same order.
Alltoall, allgather and reducescatter of other process sets, and empty
tensors (and a reducescatter with fewer rows than ranks) go through host
memory (a copy to the host and the result back to the tensor's device).
Device allreduce and broadcast are refused by kolod for process sets other
than the global one.

A failed collective raises the kolo.KoloError subclass of its status code
(FailedPreconditionError when ranks disagree on shapes or dtypes, with kolod's
message naming the ranks and values).

Gradients follow horovod.torch: they are those of the loss averaged over the
ranks (each rank's loss counts 1/size), so an allgather's or a broadcast's
gradient is the average of the ranks' gradients, and reducescatter's is the
gathered gradient (times size for op Sum).
"""

import math

import torch

import kolo._api as _api
from kolo import _shared
from kolo._api import ReduceOp, Average, Sum, Min, Max, Product, global_process_set  # noqa: F401
# horovod.torch.mpi_ops exports these too; programs import them from there.
from kolo._api import (  # noqa: F401
    Adasum, ProcessSet, add_process_set, remove_process_set, size, rank, local_rank,
    local_size, is_initialized, shutdown,
)
from kolo._native import core
from kolo._topology import cross_rank, cross_size, is_homogeneous  # noqa: F401
from kolo.errors import KoloError as HorovodInternalError  # noqa: F401  (Horovod's name)
from kolo.torch.compression import Compression, prepare, prepare_group
from kolo.torch._handles import (  # noqa: F401  (Handle, poll, synchronize: public)
    _DTYPE_CODES, _code, _host, _arena_tensor, _check_tensor, _is_cuda, _stream,
    Handle, _Done, poll, synchronize, _wait_plain, _wait_output, claim_name,
)
from kolo.torch._handles import forget_names as _forget_names, moved_on as _moved_on


# ---------------------------------------------------------------- allreduce

def _allreduce_start(tensor, output, name, op, prescale, postscale, wire, process_set):
    """Reduces `tensor` into `output` (the same tensor for the in-place forms)."""
    _check_tensor(tensor, "allreduce")
    op_code = int(op)
    hold = claim_name("allreduce", name, process_set)
    name = _shared.collective_name("allreduce", name, process_set)
    ps = _shared.ps_id(process_set)
    if _is_cuda(tensor) and tensor.numel() > 0:
        if output is not tensor:
            output.copy_(tensor)
        work = output if output.is_contiguous() else output.contiguous()
        hid = core.allreduce_device_async(
            work.data_ptr(), list(work.shape), _code(work), work.device.index, _stream(work),
            name, op_code, float(prescale), float(postscale), int(wire), ps)
        after = None if work is output else (lambda: output.copy_(work))
        return hold(Handle(hid, _wait_plain(output, after), (work, output)))
    # Host tensors, and empty CUDA tensors (no device memory to share),
    # through host memory.
    src = tensor.detach().cpu() if _is_cuda(tensor) else tensor
    src = src if src.is_contiguous() else src.contiguous()
    work = output if not _is_cuda(output) and output.is_contiguous() else torch.empty(
        output.shape, dtype=output.dtype)
    after = None if work is output else (lambda: output.copy_(work))
    hid = core.allreduce_async(_host(src), _host(work), _code(src), name, op_code,
                               float(prescale), float(postscale), int(wire), ps)
    return hold(Handle(hid, _wait_plain(output, after), (src, work, output)))


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing `tensor` in place over the ranks (default op Average);
    synchronize() returns it."""
    return _allreduce_start(tensor, tensor, name, _shared.op_code(op, average),
                            prescale_factor, postscale_factor, 0, process_set)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """Reduces `tensor` in place over the ranks and returns it."""
    return allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor,
                            process_set).wait()


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing `tensor` over the ranks into a new tensor."""
    _check_tensor(tensor, "allreduce")
    output = torch.empty_like(tensor, memory_format=torch.contiguous_format)
    return _allreduce_start(tensor, output, name, _shared.op_code(op, average),
                            prescale_factor, postscale_factor, 0, process_set)


def _compressed_allreduce(tensor, average, name, compression, op, prescale, postscale,
                          process_set):
    compressed, ctx, wire = prepare(compression, tensor)
    output = torch.empty_like(compressed, memory_format=torch.contiguous_format)
    handle = _allreduce_start(compressed, output, name, _shared.op_code(op, average), prescale,
                              postscale, wire, process_set)
    return compression.decompress(handle.wait(), ctx)


class _AllreduceFn(torch.autograd.Function):
    """Allreduce with a gradient: the gradient is allreduced with the same op
    and scale factors."""

    @staticmethod
    def forward(ctx, tensor, average, name, compression, op, prescale, postscale, process_set):
        ctx.args = (average, op, prescale, postscale, process_set)
        return _compressed_allreduce(tensor, average, name, compression, op, prescale,
                                     postscale, process_set)

    @staticmethod
    def backward(ctx, grad):
        average, op, prescale, postscale, process_set = ctx.args
        reduced = allreduce_async(grad.contiguous(), average, None, op, prescale, postscale,
                                  process_set).wait()
        return reduced, None, None, None, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """The reduction of `tensor` over the ranks (default op Average), as a new
    tensor; differentiable."""
    _check_tensor(tensor, "allreduce")
    return _AllreduceFn.apply(tensor, average, name, compression, op, prescale_factor,
                              postscale_factor, process_set)


def _grouped_allreduce_start(tensors, outputs, name, op, prescale, postscale, wire,
                             process_set):
    for t in tensors:
        _check_tensor(t, "grouped_allreduce")
    _moved_on()
    names = _shared.group_names("grouped_allreduce", name, len(tensors), process_set)
    if any(_is_cuda(t) for t in tensors):
        if (len({t.device for t in tensors}) != 1 or not all(_is_cuda(t) for t in tensors)
                or any(t.numel() == 0 for t in tensors)):
            # Mixed devices, or empty tensors: one allreduce each.
            parts = [_allreduce_start(t, o, n, op, prescale, postscale, wire, process_set)
                     for t, o, n in zip(tensors, outputs, names)]
            return _group(parts)
        # One device allreduce of the whole group, fused by kolod, in place
        # on the outputs (contiguous working copies where they are not).
        works = []
        for t, o in zip(tensors, outputs):
            if o is not t:
                o.copy_(t)
            works.append(o if o.is_contiguous() else o.contiguous())
        ids = core.grouped_allreduce_device_async(
            [w.data_ptr() for w in works], [list(w.shape) for w in works],
            [_code(w) for w in works], works[0].device.index, _stream(works[0]), names,
            int(op), float(prescale), float(postscale), int(wire), _shared.ps_id(process_set))
        parts = []
        for hid, w, o in zip(ids, works, outputs):
            after = None if w is o else (lambda w=w, o=o: o.copy_(w))
            parts.append(Handle(hid, _wait_plain(o, after), (w, o)))
        return _group(parts)
    srcs = [t if t.is_contiguous() else t.contiguous() for t in tensors]
    works = [o if o.is_contiguous() else torch.empty_like(o, memory_format=torch.contiguous_format)
             for o in outputs]
    ids = core.grouped_allreduce_async([_host(s) for s in srcs], [_host(w) for w in works],
                                       [_code(s) for s in srcs], names, int(op),
                                       float(prescale), float(postscale), int(wire),
                                       _shared.ps_id(process_set))
    parts = []
    for hid, s, w, o in zip(ids, srcs, works, outputs):
        after = None if w is o else (lambda w=w, o=o: o.copy_(w))
        parts.append(Handle(hid, _wait_plain(o, after), (s, w, o)))
    return _group(parts)


def _group(parts):
    """One handle over several; its wait returns their results in order (and
    raises the first error once all finished)."""
    return _shared.GroupHandle(parts)


def _output_group(ids, srcs, devices):
    """The handle of a grouped allgather or reducescatter."""
    return _group([Handle(h, _wait_output(s.dtype, device=d), (s,))
                   for h, s, d in zip(ids, srcs, devices)])


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing several tensors in place, negotiated as one group."""
    return _grouped_allreduce_start(list(tensors), list(tensors), name,
                                    _shared.op_code(op, average), prescale_factor,
                                    postscale_factor, 0, process_set)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    return grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                    postscale_factor, process_set).wait()


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    tensors = list(tensors)
    for t in tensors:
        _check_tensor(t, "grouped_allreduce")
    outputs = [torch.empty_like(t, memory_format=torch.contiguous_format) for t in tensors]
    return _grouped_allreduce_start(tensors, outputs, name, _shared.op_code(op, average),
                                    prescale_factor, postscale_factor, 0, process_set)


class _GroupedAllreduceFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, average, name, compression, op, prescale, postscale, process_set,
                *tensors):
        ctx.args = (average, op, prescale, postscale, process_set)
        prepared, wire = prepare_group(compression, tensors)
        outputs = [torch.empty_like(c, memory_format=torch.contiguous_format)
                   for c, _ in prepared]
        results = _grouped_allreduce_start([c for c, _ in prepared], outputs, name,
                                           _shared.op_code(op, average), prescale, postscale,
                                           wire, process_set).wait()
        return tuple(compression.decompress(r, x) for r, (_, x) in zip(results, prepared))

    @staticmethod
    def backward(ctx, *grads):
        average, op, prescale, postscale, process_set = ctx.args
        reduced = grouped_allreduce_async([g.contiguous() for g in grads], average, None, op,
                                          prescale, postscale, process_set).wait()
        return (None,) * 7 + tuple(reduced)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set):
    """The reductions of several tensors, negotiated and fused as one unit;
    differentiable."""
    tensors = list(tensors)
    for t in tensors:
        _check_tensor(t, "grouped_allreduce")
    if not tensors:
        return []
    return list(_GroupedAllreduceFn.apply(average, name, compression, op, prescale_factor,
                                          postscale_factor, process_set, *tensors))


# ---------------------------------------------------------------- broadcast

def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts replacing `tensor` in place with root_rank's."""
    _check_tensor(tensor, "broadcast")
    hold = claim_name("broadcast", name, process_set)
    name = _shared.collective_name("broadcast", name, process_set)
    ps = _shared.ps_id(process_set)
    work = tensor if tensor.is_contiguous() else tensor.contiguous()
    if _is_cuda(work) and work.numel() > 0:
        hid = core.broadcast_device_async(work.data_ptr(), list(work.shape), _code(work),
                                          work.device.index, _stream(work), name,
                                          int(root_rank), ps)
    else:
        # Host tensors, and empty CUDA tensors, through host memory.
        if _is_cuda(work):
            work = work.cpu()
        hid = core.broadcast_async(_host(work), _code(work), name, int(root_rank), ps)
    after = None if work is tensor else (lambda: tensor.copy_(work))
    return hold(Handle(hid, _wait_plain(tensor, after), (work, tensor)))


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Replaces `tensor` in place with root_rank's and returns it."""
    return broadcast_async_(tensor, root_rank, name, process_set).wait()


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts a broadcast from root_rank into a copy of `tensor`."""
    _check_tensor(tensor, "broadcast")
    return broadcast_async_(tensor.detach().clone(memory_format=torch.contiguous_format),
                            root_rank, name, process_set)


class _BroadcastFn(torch.autograd.Function):
    """Broadcast with a gradient: the root receives the average of every
    rank's gradient, the others zero."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank, ctx.process_set = root_rank, process_set
        return broadcast_async(tensor, root_rank, name, process_set).wait()

    @staticmethod
    def backward(ctx, grad):
        reduced = allreduce_async(grad.contiguous(), op=Average,
                                  process_set=ctx.process_set).wait()
        if _api.rank() != ctx.root_rank:  # root_rank is a global rank
            reduced.zero_()
        return reduced, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """root_rank's `tensor` on every rank, as a new tensor; differentiable."""
    _check_tensor(tensor, "broadcast")
    return _BroadcastFn.apply(tensor, root_rank, name, process_set)


# ---------------------------------------------------------------- allgather

def _host_input(tensor):
    """(contiguous CPU tensor to read, device to return the result to)."""
    device = tensor.device if _is_cuda(tensor) else None
    t = tensor.detach()
    if device is not None:
        t = t.cpu()
    return (t if t.is_contiguous() else t.contiguous()), device


def _device_allgather(tensor, nm, process_set):
    """A CUDA tensor of the global set gathered on its GPU by kolod: every
    rank's first dimension first (a host allgather of one number, waited for
    here, so the output can be allocated), then the device allgather into
    it. None when some rank sends no data (no device memory to share): every
    rank sees the same counts and takes the host path instead."""
    src = tensor.detach()
    if src.dim() == 0:
        src = src.reshape(1)
    src = src if src.is_contiguous() else src.contiguous()
    row_numel = math.prod(src.shape[1:])
    mine = torch.tensor([src.shape[0]], dtype=torch.int64)
    rows = core.allgather_async(_host(mine), _code(mine), nm + ".rows", _shared.ps_id(process_set))
    counts = Handle(rows, _wait_output(torch.int64), (mine,)).wait()
    if int(counts.min()) == 0 or row_numel == 0:
        return None
    total = int(counts.sum())
    out = torch.empty((total,) + tuple(src.shape[1:]), dtype=src.dtype, device=src.device)
    hid = core.allgather_device_async(src.data_ptr(), list(src.shape), out.data_ptr(),
                                      list(out.shape), _code(src), src.device.index,
                                      _stream(src), nm, _shared.ps_id(process_set))
    return Handle(hid, _wait_plain(out), (src, out))


def _on_device(tensor, process_set):
    """Whether kolod runs this collective on the tensor's GPU (CUDA tensors
    of the global process set; others pass through host memory)."""
    return _is_cuda(tensor) and _shared.ps_id(process_set) == 0


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts gathering every rank's `tensor` along the first dimension. A
    CUDA tensor of the global set is gathered on its GPU; its row counts are
    exchanged first, at this call, so every rank must start its CUDA
    allgathers in the same order (as with NCCL)."""
    _check_tensor(tensor, "allgather")
    hold = claim_name("allgather", name, process_set)
    nm = _shared.collective_name("allgather", name, process_set)
    if _on_device(tensor, process_set):
        handle = _device_allgather(tensor, nm, process_set)
        if handle is not None:
            return hold(handle)
    src, device = _host_input(tensor)
    if src.dim() == 0:
        src = src.reshape(1)
    hid = core.allgather_async(_host(src), _code(src), nm, _shared.ps_id(process_set))
    return hold(Handle(hid, _wait_output(src.dtype, device=device), (src,)))


class _AllgatherFn(torch.autograd.Function):
    """Allgather with a gradient: every rank's gradient reduced with
    `grad_op` (Average, as Horovod; Sum gives the gradient of the sum of the
    ranks' losses), this rank's rows of it."""

    @staticmethod
    def forward(ctx, tensor, name, process_set, grad_op):
        ctx.rows = tensor.shape[0] if tensor.dim() > 0 else 1
        ctx.process_set, ctx.grad_op = process_set, grad_op
        return allgather_async(tensor, name, process_set).wait()

    @staticmethod
    def backward(ctx, grad):
        reduced = allreduce_async(grad.contiguous(), op=ctx.grad_op,
                                  process_set=ctx.process_set).wait()
        rows = allgather_async(torch.tensor([ctx.rows], dtype=torch.int64),
                               process_set=ctx.process_set).wait()
        offset = int(rows[:_shared.ps_rank(ctx.process_set)].sum())
        return reduced.narrow(0, offset, ctx.rows), None, None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Every rank's `tensor` concatenated along the first dimension in rank
    order (the first dimension may differ per rank); differentiable."""
    _check_tensor(tensor, "allgather")
    return _AllgatherFn.apply(tensor, name, process_set, Average)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    tensors = list(tensors)
    for t in tensors:
        _check_tensor(t, "grouped_allgather")
    _moved_on()
    prepared = [_host_input(t) for t in tensors]
    srcs = [s.reshape(1) if s.dim() == 0 else s for s, _ in prepared]
    names = _shared.group_names("grouped_allgather", name, len(srcs), process_set)
    ids = core.grouped_allgather_async([_host(s) for s in srcs], [_code(s) for s in srcs],
                                       names, _shared.ps_id(process_set))
    return _output_group(ids, srcs, [d for _, d in prepared])


class _GroupedAllgatherFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.rows = [t.shape[0] if t.dim() > 0 else 1 for t in tensors]
        ctx.process_set = process_set
        return tuple(grouped_allgather_async(tensors, name, process_set).wait())

    @staticmethod
    def backward(ctx, *grads):
        reduced = grouped_allreduce_async([g.contiguous() for g in grads], op=Average,
                                          process_set=ctx.process_set).wait()
        rows = allgather_async(torch.tensor(ctx.rows, dtype=torch.int64).reshape(1, -1),
                               process_set=ctx.process_set).wait()
        offsets = rows[:_shared.ps_rank(ctx.process_set)].sum(0)
        return (None, None) + tuple(r.narrow(0, int(o), n)
                                    for r, o, n in zip(reduced, offsets, ctx.rows))


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """allgather of several tensors, negotiated as one group; differentiable."""
    tensors = list(tensors)
    if not tensors:
        return []
    return list(_GroupedAllgatherFn.apply(name, process_set, *tensors))


# ---------------------------------------------------------------- reducescatter

def _scatter_op(op):
    op = ReduceOp(int(Average if op is None else op))
    if op not in (ReduceOp.SUM, ReduceOp.AVERAGE):
        raise ValueError(f"reducescatter supports op Sum and Average, not {op.name}")
    return op


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    _check_tensor(tensor, "reducescatter")
    op = _scatter_op(op)
    hold = claim_name("reducescatter", name, process_set)
    nm = _shared.collective_name("reducescatter", name, process_set)
    if (_on_device(tensor, process_set) and tensor.dim() > 0 and tensor.numel() > 0
            and tensor.shape[0] >= _shared.ps_size(process_set)):
        # This rank's rows of the result, on the tensor's GPU.
        src = tensor.detach()
        src = src if src.is_contiguous() else src.contiguous()
        rows = core.scatter_rows(src.shape[0], _shared.ps_size(process_set),
                                 _shared.ps_rank(process_set))
        out = torch.empty((rows,) + tuple(src.shape[1:]), dtype=src.dtype, device=src.device)
        hid = core.reducescatter_device_async(
            src.data_ptr(), list(src.shape), out.data_ptr(), list(out.shape), _code(src),
            src.device.index, _stream(src), nm, int(op), float(prescale_factor),
            float(postscale_factor), _shared.ps_id(process_set))
        return hold(Handle(hid, _wait_plain(out), (src, out)))
    src, device = _host_input(tensor)
    hid = core.reducescatter_async(_host(src), _code(src), nm, int(op), float(prescale_factor),
                                   float(postscale_factor), _shared.ps_id(process_set))
    return hold(Handle(hid, _wait_output(src.dtype, device=device), (src,)))


def _scatter_grad(grad, op, prescale, postscale, process_set):
    """The gradient of reducescatter (of the loss averaged over ranks): every
    rank's output gradient gathered, times size for op Sum and times the
    scale factors."""
    full = allgather_async(grad.contiguous(), process_set=process_set).wait()
    scale = float(prescale) * float(postscale)
    if ReduceOp(int(op)) == ReduceOp.SUM:
        scale *= _shared.ps_size(process_set)
    return full * scale if scale != 1.0 else full


class _ReducescatterFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, compression, op, process_set, prescale, postscale):
        ctx.args = (op, prescale, postscale, process_set)
        compressed, cctx = compression.compress(tensor)
        out = reducescatter_async(compressed, name, op, process_set, prescale,
                                  postscale).wait()
        return compression.decompress(out, cctx)

    @staticmethod
    def backward(ctx, grad):
        op, prescale, postscale, process_set = ctx.args
        return (_scatter_grad(grad, op, prescale, postscale, process_set),
                None, None, None, None, None, None)


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """This rank's block of rows of the reduction of `tensor` (op Sum or
    Average; lower ranks take one extra row when the rows do not divide);
    differentiable."""
    _check_tensor(tensor, "reducescatter")
    return _ReducescatterFn.apply(tensor, name, compression, _scatter_op(op), process_set,
                                  prescale_factor, postscale_factor)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    tensors = list(tensors)
    for t in tensors:
        _check_tensor(t, "grouped_reducescatter")
    _moved_on()
    op = _scatter_op(op)
    prepared = [_host_input(t) for t in tensors]
    srcs = [s for s, _ in prepared]
    ids = core.grouped_reducescatter_async(
        [_host(s) for s in srcs], [_code(s) for s in srcs],
        _shared.group_names("grouped_reducescatter", name, len(srcs), process_set), int(op),
        float(prescale_factor), float(postscale_factor), _shared.ps_id(process_set))
    return _output_group(ids, srcs, [d for _, d in prepared])


class _GroupedReducescatterFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, compression, op, process_set, prescale, postscale, *tensors):
        ctx.args = (op, prescale, postscale, process_set)
        pairs = [compression.compress(t) for t in tensors]
        outs = grouped_reducescatter_async([c for c, _ in pairs], name, op, process_set,
                                           prescale, postscale).wait()
        return tuple(compression.decompress(o, c) for o, (_, c) in zip(outs, pairs))

    @staticmethod
    def backward(ctx, *grads):
        op, prescale, postscale, process_set = ctx.args
        return (None,) * 6 + tuple(_scatter_grad(g, op, prescale, postscale, process_set)
                                   for g in grads)


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """reducescatter of several tensors, negotiated as one group;
    differentiable."""
    tensors = list(tensors)
    if not tensors:
        return []
    return list(_GroupedReducescatterFn.apply(name, compression, _scatter_op(op), process_set,
                                              prescale_factor, postscale_factor, *tensors))


# ---------------------------------------------------------------- alltoall

def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    _check_tensor(tensor, "alltoall")
    hold = claim_name("alltoall", name, process_set)
    src, device = _host_input(tensor)
    if splits is None:
        sp = []
    else:
        sp = [int(s) for s in (splits.tolist() if isinstance(splits, torch.Tensor)
                               else splits)]
    hid = core.alltoall_async(_host(src), _code(src), sp,
                              _shared.collective_name("alltoall", name, process_set),
                              _shared.ps_id(process_set))
    like = splits if isinstance(splits, torch.Tensor) else None
    return hold(Handle(hid, _wait_output(src.dtype, alltoall=True, device=device,
                                         splits_like=like), (src,)))


class _AlltoallFn(torch.autograd.Function):
    """Alltoall with a gradient: the output gradient sent back along the rows
    each rank received."""

    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        out, received = alltoall_async(tensor, splits, name, process_set).wait()
        ctx.received, ctx.process_set = received, process_set
        if splits is None:
            return out
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx, grad, *_grad_splits):
        back, _ = alltoall_async(grad.contiguous(), ctx.received,
                                 process_set=ctx.process_set).wait()
        return back, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends splits[j] rows of `tensor` to rank j; returns the received rows
    in rank order and, when `splits` was given, the rows received from each
    rank (an even split without it, and only the rows, as Horovod);
    differentiable. alltoall_async's handle always gives both."""
    _check_tensor(tensor, "alltoall")
    return _AlltoallFn.apply(tensor, splits, name, process_set)


def init(comm=None, process_sets=None):
    """Attaches this process to kolod as the rank its KOLO_* environment names
    (a job of one rank without it) and registers `process_sets` (a list of
    ProcessSet, the same on every rank)."""
    _forget_names()
    _api.init_job(comm, process_sets)


# ---------------------------------------------------------------- sparse

def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Starts reducing a sparse tensor: every rank's indices and values are
    allgathered, summed (coalesced) and, for op Average, divided by the
    number of ranks; synchronize() returns the sparse result."""
    op = ReduceOp(int(op))
    if op not in (ReduceOp.SUM, ReduceOp.AVERAGE):
        raise ValueError(f"sparse allreduce supports op Sum and Average, not {op.name}")
    if not tensor.is_sparse:
        raise TypeError("sparse_allreduce_async takes a sparse tensor")
    grad = tensor.coalesce()
    values = allgather_async(grad._values(), name=f"{name}.values" if name else None,
                             process_set=process_set)
    indices = allgather_async(grad._indices().t().contiguous(),
                              name=f"{name}.indices" if name else None,
                              process_set=process_set)
    size = _shared.ps_size(process_set)

    def finish():
        v, i = values.wait(), indices.wait()
        out = torch.sparse_coo_tensor(i.t(), v, grad.size(), check_invariants=True).coalesce()
        return out / size if op == ReduceOp.AVERAGE else out
    return _Done(finish, [values, indices])


# ---------------------------------------------------------------- control

def barrier(process_set=global_process_set):
    """Returns once every rank of the process set has called it."""
    _moved_on()
    core.barrier(_shared.ps_id(process_set))


def join(device=-1):
    """Declares this rank out of data (it contributes zeros to the others'
    allreduces meanwhile); returns the last rank to join once all have.
    `device` is accepted for horovod.torch's signature: kolod needs none."""
    del device
    _moved_on()
    return int(core.join())
