"""Checks of kolo.torch run on every rank; each compares the collective's
result with the same computation done in one process over every rank's input
(every rank can rebuild every other rank's input from its rank number)."""

import inspect
import os
import time
import warnings

import torch

import kolo.torch as hvd
from harness import check, run
from trace_check import read_trace

# Registered at init on every rank (np2 and np3 both have ranks 0 and 1).
PAIR = hvd.ProcessSet([0, 1])
hvd.init(process_sets=[PAIR])
R, N = hvd.rank(), hvd.size()
torch.manual_seed(1234)

FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
INTS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]
ALL = FLOATS + INTS + [torch.bool]


def expect(cond, msg):
    if not cond:
        raise AssertionError(msg)


def close(a, b, tol=1e-5, what=""):
    a, b = torch.as_tensor(a), torch.as_tensor(b)
    expect(a.shape == b.shape, f"{what}: shape {tuple(a.shape)} != {tuple(b.shape)}")
    expect(a.dtype == b.dtype, f"{what}: dtype {a.dtype} != {b.dtype}")
    if a.dtype == torch.bool or not (a.dtype.is_floating_point):
        expect(torch.equal(a, b), f"{what}: {a.tolist()} != {b.tolist()}")
    else:
        expect(torch.allclose(a.double(), b.double(), rtol=tol, atol=tol),
               f"{what}: {a.tolist()} != {b.tolist()}")


def tol_of(dtype):
    return {torch.float16: 1e-2, torch.bfloat16: 5e-2}.get(dtype, 1e-5)


def value(rank, shape, dtype, lo=-4, hi=5):
    """Rank `rank`'s deterministic input."""
    g = torch.Generator().manual_seed(1000 + rank)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype == torch.uint8:
        lo = 0
    t = torch.randint(lo, hi, shape, generator=g)
    if dtype.is_floating_point:
        t = t.double() / 2
    return t.to(dtype)


def reference(op, tensors, dtype):
    """The reduction of `tensors` in one process."""
    if dtype == torch.bool:
        stack = torch.stack(tensors)
        if op in (hvd.Sum, hvd.Max):
            return stack.any(0)
        return stack.all(0)
    stack = torch.stack([t.double() if dtype.is_floating_point else t.long()
                         for t in tensors])
    if op == hvd.Sum:
        out = stack.sum(0)
    elif op == hvd.Average:
        out = stack.sum(0) / len(tensors)
        if not dtype.is_floating_point:
            out = torch.trunc(out)
    elif op == hvd.Min:
        out = stack.min(0).values
    elif op == hvd.Max:
        out = stack.max(0).values
    else:
        out = stack.prod(0)
    if not dtype.is_floating_point:
        # Integer sums and products wrap in the tensor's width.
        bits = torch.iinfo(dtype).bits
        out = out.long() & ((1 << bits) - 1)
        if dtype != torch.uint8 and bits < 64:
            out = torch.where(out >= (1 << (bits - 1)), out - (1 << bits), out)
    return out.to(dtype)


def all_values(shape, dtype, **kw):
    return [value(r, shape, dtype, **kw) for r in range(N)]


# ---------------------------------------------------------------- basics

@check
def topology():
    expect(hvd.is_initialized(), "not initialized")
    expect(0 <= R < N and N in (2, 3), f"rank {R} size {N}")
    expect(hvd.local_size() == N and hvd.local_rank() == R, "one node: local == global")
    expect(hvd.cross_size() == 1 and hvd.cross_rank() == 0, "one node")
    expect(hvd.is_homogeneous(), "homogeneous")


@check
def allreduce_every_dtype_and_op():
    for dtype in ALL:
        ops = [hvd.Sum, hvd.Min, hvd.Max, hvd.Product]
        if dtype != torch.bool:
            ops.append(hvd.Average)
        for op in ops:
            lo, hi = (-2, 3) if op == hvd.Product else (-4, 5)
            mine = value(R, [3, 4], dtype, lo, hi)
            got = hvd.allreduce(mine, op=op, name=f"ar.{dtype}.{int(op)}")
            want = reference(op, all_values([3, 4], dtype, lo=lo, hi=hi), dtype)
            close(got, want, tol_of(dtype), f"allreduce {dtype} op {int(op)}")
            expect(torch.equal(mine, value(R, [3, 4], dtype, lo, hi)), "input changed")


@check
def uint16_allreduce_broadcast_allgather():
    # torch computes little on uint16: the values are checked as int64.
    mine = torch.tensor([R + 1, 65535 - R, 7], dtype=torch.uint16)
    got = hvd.allreduce(mine, op=hvd.Max, name="u16.max")
    expect(got.dtype == torch.uint16, f"allreduce uint16 gave {got.dtype}")
    expect(got.long().tolist() == [N, 65535, 7], f"allreduce uint16: {got.long().tolist()}")
    got = hvd.broadcast(mine, N - 1, name="u16.bcast")
    expect(got.long().tolist() == [N, 65536 - N, 7], f"broadcast uint16: {got.long().tolist()}")
    got = hvd.allgather(mine, name="u16.gather")
    want = [v for r in range(N) for v in (r + 1, 65535 - r, 7)]
    expect(got.dtype == torch.uint16 and got.long().tolist() == want,
           f"allgather uint16: {got.long().tolist()}")


@check
def allreduce_average_is_default_and_average_flag():
    x = value(R, [5], torch.float32)
    close(hvd.allreduce(x), reference(hvd.Average, all_values([5], torch.float32),
                                      torch.float32), what="default op")
    close(hvd.allreduce(x, average=False), reference(hvd.Sum, all_values([5], torch.float32),
                                                     torch.float32), what="average=False")


@check
def allreduce_in_place_async_and_handles():
    x = value(R, [4, 3], torch.float32)
    want = reference(hvd.Sum, all_values([4, 3], torch.float32), torch.float32)
    y = x.clone()
    out = hvd.allreduce_(y, op=hvd.Sum)
    expect(out is y, "allreduce_ returns its tensor")
    close(y, want, what="allreduce_")
    h = hvd.allreduce_async(x, op=hvd.Sum, name="async.out")
    close(hvd.synchronize(h), want, what="allreduce_async")
    y = x.clone()
    h = hvd.allreduce_async_(y, op=hvd.Sum, name="async.inplace")
    while not hvd.poll(h):
        pass
    close(hvd.synchronize(h), want, what="allreduce_async_")
    close(y, want, what="allreduce_async_ in place")
    # A non-contiguous tensor, reduced in place.
    base = value(R, [3, 4], torch.float32)
    t = base.t()
    hvd.allreduce_(t, op=hvd.Sum, name="noncontig")
    close(t, reference(hvd.Sum, all_values([3, 4], torch.float32), torch.float32).t(),
          what="non-contiguous allreduce_")
    close(base.t(), t, what="the base saw the in-place result")


@check
def allreduce_scale_factors_and_scalar():
    x = value(R, [6], torch.float64)
    want = reference(hvd.Sum, all_values([6], torch.float64), torch.float64) * 0.5 * 3.0
    close(hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0), want,
          what="pre/postscale")
    s = torch.tensor(float(R + 1))
    close(hvd.allreduce(s, op=hvd.Sum), torch.tensor(float(N * (N + 1) // 2)), what="scalar")


@check
def allreduce_compression():
    for dtype in (torch.float32, torch.float64):
        for comp in (hvd.Compression.fp16, hvd.Compression.bf16):
            x = value(R, [16], dtype)
            got = hvd.allreduce(x, op=hvd.Sum, compression=comp)
            expect(got.dtype == dtype, f"{comp}: result dtype {got.dtype}")
            close(got, reference(hvd.Sum, all_values([16], dtype), dtype), 5e-2,
                  f"compression {comp.__name__} {dtype}")


@check
def grouped_allreduce_forms():
    dts = [torch.float32, torch.int64, torch.float64]
    xs = [value(R, [i + 2], d) for i, d in enumerate(dts)]
    wants = [reference(hvd.Sum, [value(r, [i + 2], d) for r in range(N)], d)
             for i, d in enumerate(dts)]
    for got, want in zip(hvd.grouped_allreduce(xs, op=hvd.Sum), wants):
        close(got, want, what="grouped_allreduce")
    for got, want in zip(hvd.synchronize(hvd.grouped_allreduce_async(xs, op=hvd.Sum)), wants):
        close(got, want, what="grouped_allreduce_async")
    ys = [x.clone() for x in xs]
    hvd.grouped_allreduce_(ys, op=hvd.Sum)
    for got, want in zip(ys, wants):
        close(got, want, what="grouped_allreduce_")
    ys = [x.clone() for x in xs]
    hvd.synchronize(hvd.grouped_allreduce_async_(ys, op=hvd.Sum))
    for got, want in zip(ys, wants):
        close(got, want, what="grouped_allreduce_async_")


@check
def broadcast_forms_every_dtype():
    root = N - 1
    for dtype in ALL:
        mine = value(R, [2, 3], dtype)
        close(hvd.broadcast(mine, root), value(root, [2, 3], dtype), what=f"broadcast {dtype}")
        expect(torch.equal(mine, value(R, [2, 3], dtype)), "broadcast changed its input")
        t = mine.clone()
        expect(hvd.broadcast_(t, root) is t, "broadcast_ returns its tensor")
        close(t, value(root, [2, 3], dtype), what=f"broadcast_ {dtype}")
    t = value(R, [4], torch.float32)
    close(hvd.synchronize(hvd.broadcast_async(t, 0)), value(0, [4], torch.float32),
          what="broadcast_async")
    hvd.synchronize(hvd.broadcast_async_(t, 0))
    close(t, value(0, [4], torch.float32), what="broadcast_async_")


@check
def allgather_every_dtype_and_ragged():
    for dtype in ALL:
        mine = value(R, [R + 1, 2], dtype)
        want = torch.cat([value(r, [r + 1, 2], dtype) for r in range(N)])
        close(hvd.allgather(mine), want, what=f"allgather {dtype}")
    close(hvd.synchronize(hvd.allgather_async(torch.tensor([R]))), torch.arange(N),
          what="allgather_async")
    xs = [value(R, [R + 1], torch.float32), value(R, [1, 3], torch.int32)]
    got = hvd.grouped_allgather(xs)
    close(got[0], torch.cat([value(r, [r + 1], torch.float32) for r in range(N)]),
          what="grouped_allgather 0")
    close(got[1], torch.cat([value(r, [1, 3], torch.int32) for r in range(N)]),
          what="grouped_allgather 1")


@check
def reducescatter_sum_average_uneven_and_grouped():
    rows = 2 * N + 1  # does not divide: lower ranks take one extra row
    counts = [rows // N + (1 if r < rows % N else 0) for r in range(N)]
    start = sum(counts[:R])
    for op in (hvd.Sum, hvd.Average):
        mine = value(R, [rows, 3], torch.float32)
        full = reference(op, all_values([rows, 3], torch.float32), torch.float32)
        close(hvd.reducescatter(mine, op=op), full[start:start + counts[R]],
              what=f"reducescatter op {int(op)}")
    full = reference(hvd.Sum, all_values([rows, 3], torch.int64), torch.int64)
    close(hvd.synchronize(hvd.reducescatter_async(value(R, [rows, 3], torch.int64),
                                                  op=hvd.Sum)),
          full[start:start + counts[R]], what="reducescatter_async")
    got = hvd.grouped_reducescatter([value(R, [rows, 3], torch.float32),
                                     value(R, [rows], torch.float64)], op=hvd.Sum)
    close(got[0], reference(hvd.Sum, all_values([rows, 3], torch.float32),
                            torch.float32)[start:start + counts[R]], what="grouped 0")
    close(got[1], reference(hvd.Sum, all_values([rows], torch.float64),
                            torch.float64)[start:start + counts[R]], what="grouped 1")
    try:
        hvd.reducescatter(value(R, [rows], torch.float32), op=hvd.Max)
    except ValueError as e:
        expect("Sum and Average" in str(e), str(e))
    else:
        raise AssertionError("reducescatter accepted op Max")


@check
def alltoall_even_and_with_splits():
    # Even: each rank sends row j to rank j.
    mine = torch.stack([torch.full([2], float(R * 10 + j)) for j in range(N)])
    out = hvd.alltoall(mine)  # without splits: only the rows, as Horovod
    close(out, torch.stack([torch.full([2], float(r * 10 + R)) for r in range(N)]),
          what="even alltoall")
    out, splits = hvd.synchronize(hvd.alltoall_async(mine))
    close(splits, torch.ones(N, dtype=torch.int32), what="even splits")
    # Splits: rank r sends j+1 rows to rank j, each row valued r*100+j.
    sp = [j + 1 for j in range(N)]
    data = torch.cat([torch.full([j + 1, 2], R * 100 + j, dtype=torch.int64) for j in range(N)])
    out, splits = hvd.alltoall(data, splits=torch.tensor(sp, dtype=torch.int64))
    want = torch.cat([torch.full([R + 1, 2], r * 100 + R, dtype=torch.int64) for r in range(N)])
    close(out, want, what="alltoall with splits")
    close(splits, torch.full([N], R + 1, dtype=torch.int64),
          what="received splits (the dtype of the splits given)")
    out, splits = hvd.synchronize(hvd.alltoall_async(data, splits=sp))
    close(out, want, what="alltoall_async")


@check
def barrier_and_objects():
    hvd.barrier()
    obj = hvd.broadcast_object({"from": R, "list": [R] * 3} if R == 1 else None, root_rank=1)
    expect(obj == {"from": 1, "list": [1, 1, 1]}, f"broadcast_object {obj}")
    got = hvd.allgather_object({"r": R, "s": "x" * R})
    expect(got == [{"r": r, "s": "x" * r} for r in range(N)], f"allgather_object {got}")


# ---------------------------------------------------------------- gradients

@check
def gradient_of_allreduce():
    for op, scale in ((hvd.Sum, 1.0), (hvd.Average, 1.0 / N)):
        x = value(R, [4], torch.float64).requires_grad_()
        y = hvd.allreduce(x * (R + 1), op=op)
        y.sum().backward()
        # d(sum over ranks of sum(y))/dx on rank R: (R+1) * N * scale.
        close(x.grad, torch.full([4], (R + 1) * N * scale, dtype=torch.float64),
              what=f"allreduce grad op {int(op)}")
    xs = [torch.ones(2, requires_grad=True), torch.ones(3, requires_grad=True)]
    outs = hvd.grouped_allreduce([xs[0] * 2, xs[1] * 3], op=hvd.Sum)
    (outs[0].sum() + outs[1].sum()).backward()
    close(xs[0].grad, torch.full([2], 2.0 * N), what="grouped grad 0")
    close(xs[1].grad, torch.full([3], 3.0 * N), what="grouped grad 1")


@check
def gradient_of_allgather_and_broadcast():
    # Horovod's convention: gradients of the loss averaged over the ranks.
    x = torch.ones(R + 1, 2, dtype=torch.float64, requires_grad=True)
    g = hvd.allgather(x)
    weights = torch.arange(g.shape[0], dtype=torch.float64).reshape(-1, 1) * (R + 1)
    (g * weights).sum().backward()
    # Rank r weighs row i by i * (r+1): this rank's rows get i * mean(r+1).
    start = sum(r + 1 for r in range(R))
    mean_w = sum(r + 1 for r in range(N)) / N
    want = (mean_w * torch.arange(start, start + R + 1, dtype=torch.float64)).reshape(-1, 1)
    close(x.grad, want.expand(R + 1, 2), what="allgather grad")
    x = torch.ones(3, dtype=torch.float64, requires_grad=True)
    root = N - 1
    (hvd.broadcast(x * 2, root_rank=root) * (R + 1)).sum().backward()
    close(x.grad, torch.full([3], 2.0 * mean_w if R == root else 0.0, dtype=torch.float64),
          what="broadcast grad")


@check
def gradient_of_alltoall_and_reducescatter():
    x = torch.ones(N, 2, dtype=torch.float64, requires_grad=True)
    out = hvd.alltoall(x)
    (out * (R + 1)).sum().backward()
    # Row j went to rank j, which weighs it by j+1.
    close(x.grad, torch.arange(1, N + 1, dtype=torch.float64).reshape(-1, 1).expand(N, 2),
          what="alltoall grad")
    for op, scale in ((hvd.Average, 1.0), (hvd.Sum, float(N))):
        x = torch.ones(N * 2, dtype=torch.float64, requires_grad=True)
        y = hvd.reducescatter(x, op=op)
        (y * (R + 1)).sum().backward()
        # Block r reaches rank r, which weighs it by r+1 (Horovod's scaling:
        # the gathered gradient, times size for Sum).
        want = torch.cat([torch.full([2], (r + 1) * scale, dtype=torch.float64)
                          for r in range(N)])
        close(x.grad, want, what=f"reducescatter grad op {int(op)}")


# ---------------------------------------------------------------- errors

@check
def mismatched_shapes_raise_on_every_rank():
    try:
        hvd.allreduce(torch.ones(2 + R), name="torch.mismatch.shape")
    except hvd.KoloError as e:
        msg = str(e)
        expect("torch.mismatch.shape" in msg, msg)
        expect("rank" in msg, f"the message names no rank: {msg}")
        expect(type(e).__name__ == "FailedPreconditionError", type(e).__name__)
    else:
        raise AssertionError("no error for mismatched shapes")


@check
def mismatched_dtypes_raise_on_every_rank():
    dtype = torch.float32 if R == 0 else torch.float64
    try:
        hvd.allreduce(torch.ones(3, dtype=dtype), name="torch.mismatch.dtype")
    except hvd.KoloError as e:
        msg = str(e)
        expect("float32" in msg and "float64" in msg, msg)
    else:
        raise AssertionError("no error for mismatched dtypes")


@check
def unsupported_input_is_refused_locally():
    for bad, kind in ((torch.ones(2, dtype=torch.complex64), TypeError),
                      (torch.ones(2).to_sparse(), TypeError), ([1.0, 2.0], TypeError)):
        try:
            hvd.allreduce(bad)
        except kind:
            pass
        else:
            raise AssertionError(f"allreduce accepted {type(bad)}")


def _ones_sum():
    """A collective that must run after whatever failed before it."""
    close(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full([2], float(N)),
          what="the next collective")


# Submitting each kind under a name this rank still has in flight; `start`
# submits one, `done` checks what its handle returned.
_DUPLICATE_KINDS = {
    "allreduce": (lambda nm: hvd.allreduce_async(torch.ones(3), name=nm, op=hvd.Sum),
                  lambda out: close(out, torch.full([3], float(N)), what="allreduce")),
    "allgather": (lambda nm: hvd.allgather_async(torch.full([1, 2], float(R)), name=nm),
                  lambda out: close(out, torch.arange(N).double().float().repeat_interleave(2)
                                    .reshape(N, 2), what="allgather")),
    "broadcast": (lambda nm: hvd.broadcast_async(torch.full([2], float(R)), 0, name=nm),
                  lambda out: close(out, torch.zeros(2), what="broadcast")),
    "reducescatter": (lambda nm: hvd.reducescatter_async(torch.ones(N, 2), name=nm,
                                                         op=hvd.Sum),
                      lambda out: close(out, torch.full([1, 2], float(N)),
                                        what="reducescatter")),
}


@check
def duplicate_in_flight_name_raises_on_the_submitting_rank():
    for kind, (start, done) in _DUPLICATE_KINDS.items():
        # Each rank in turn submits the name first and again while the others
        # have not submitted it: the second raises there, at the call.
        for first in range(N):
            nm = f"torch.dup.{kind}.{first}"
            handle = None
            if R == first:
                handle = start(nm)
                try:
                    start(nm)
                except ValueError as e:  # horovod.torch raises ValueError
                    expect(isinstance(e, hvd.DuplicateNameError) and nm in str(e)
                           and "in flight" in str(e), f"{type(e).__name__}: {e}")
                else:
                    raise AssertionError(f"{kind}: rank {R} submitted {nm} twice")
            hvd.barrier()
            if R != first:
                handle = start(nm)
            done(hvd.synchronize(handle))
        # Horovod's own test: rank 0 submits the name (its loop of duplicates
        # raises at the first), then every other rank submits it and at once
        # again (its collective may have completed by then: still refused,
        # nothing else was submitted in between). Handles left unwaited.
        nm = f"torch.dup.{kind}.horovod"
        raised = 0
        if R == 0:
            start(nm)
            try:
                for _ in range(10):
                    start(nm)
            except ValueError:
                raised += 1
        hvd.barrier()
        if R > 0:
            start(nm)
            try:
                start(nm)
            except ValueError:
                raised += 1
        hvd.barrier()
        expect(raised == 1, f"{kind}: rank {R} raised {raised} times for {nm}")
        # Once it completed and the rank moved on, the name is free again.
        done(hvd.synchronize(start(nm)))
    _ones_sum()


@check
def failed_collective_leaves_the_job_usable():
    """Horovod's error tests run one after another in one job: after each
    failure (tried twice under one name) every rank's next collective runs."""
    cases = {
        "shape": lambda nm: hvd.allreduce(torch.ones(2 + R), name=nm),
        "dtype": lambda nm: hvd.allgather(
            torch.ones(3, dtype=torch.int32 if R == 0 else torch.float32), name=nm),
        "op": lambda nm: hvd.allreduce(torch.ones(3), op=hvd.Sum if R else hvd.Max, name=nm),
        "root": lambda nm: hvd.broadcast(torch.ones(3), root_rank=R, name=nm),
        "root_outside": lambda nm: hvd.broadcast(torch.ones(3), root_rank=N, name=nm),
        "reducescatter_shape": lambda nm: hvd.reducescatter(torch.ones(N + R, 2), name=nm),
        "alltoall_splits_length": lambda nm: hvd.alltoall(torch.ones(6),
                                                          splits=torch.tensor([6]), name=nm),
        "alltoall_one_rank_overflows": lambda nm: hvd.alltoall(
            torch.ones(6), splits=torch.tensor([7] * N if R == 1 else [2] * N), name=nm),
        "prescale": lambda nm: hvd.allreduce(torch.ones(3), prescale_factor=1.0 + R, name=nm),
    }
    for what, fn in cases.items():
        for attempt in range(2):
            try:
                fn(f"torch.usable.{what}")
            except hvd.KoloError as e:
                expect(type(e).__name__ in ("FailedPreconditionError", "InvalidArgumentError"),
                       f"{what} (attempt {attempt}): {type(e).__name__}: {e}")
            else:
                raise AssertionError(f"{what}: no error on rank {R}")
            _ones_sum()


@check
def built_flags_follow_horovods_types():
    from kolo._native import core
    version = hvd.nccl_built()
    expect(type(version) is int and version == core.NCCL_VERSION, f"nccl_built {version!r}")
    # Horovod's code: major*10000 + minor*100 + patch (NCCL >= 2.9).
    expect(version == 0 or version >= 20900, f"nccl_built {version}")
    expect(hvd.cuda_built() is (version != 0), f"cuda_built {hvd.cuda_built()!r}")
    for flag in ("mpi_built", "mpi_enabled", "gloo_built", "gloo_enabled", "rocm_built",
                 "ddl_built", "ccl_built", "mpi_threads_supported"):
        expect(getattr(hvd, flag)() is False, f"{flag}() is {getattr(hvd, flag)()!r}")


@check
def sparse_allreduce_async_handle_is_callable_and_synchronizable():
    g = torch.Generator().manual_seed(77)
    mine = []
    for r in range(N):
        t = torch.rand(9, 4, generator=g)
        t[t < 0.7] = 0
        mine.append(t)
    want_avg = torch.stack(mine).mean(0)
    sparse = mine[R].to_sparse()
    # horovod.torch's handle is a function: its own tests call it.
    got = hvd.sparse_allreduce_async(sparse, op=hvd.Average, name="torch.sparse.call")()
    close(got.to_dense(), want_avg, what="called handle")
    handle = hvd.sparse_allreduce_async(sparse, op=hvd.Sum, name="torch.sparse.sync")
    while not hvd.poll(handle):
        pass
    close(hvd.synchronize(handle).to_dense(), torch.stack(mine).sum(0), what="synchronize")


@check
def horovod_names_and_compressors():
    for name in ("Adasum", "HorovodInternalError", "sparse_allreduce_async", "mpi_ops",
                 "cross_rank", "is_homogeneous", "nccl_built", "gloo_built", "mpi_built"):
        expect(hasattr(hvd, name), f"kolo.torch has no {name}")
    expect(hvd.mpi_ops.size() == N and hvd.mpi_ops.rank() == R, "mpi_ops aliases")
    expect(torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Adasum), torch.ones(2)),
           "Adasum of equal tensors")
    c, ctx = hvd.Compression.fp16.compress(torch.ones(2))
    expect(c.dtype == torch.float16 and ctx == torch.float32, f"{c.dtype} {ctx}")
    expect(hvd.Compression.fp16.decompress(c, ctx).dtype == torch.float32, "decompress")
    sp = torch.sparse_coo_tensor([[R]], [float(R + 1)], (N,))
    got = hvd.synchronize(hvd.sparse_allreduce_async(sp, "sparse.sum", hvd.Sum))
    close(got.to_dense(), torch.arange(1, N + 1, dtype=torch.float32), what="sparse allreduce")


# ---------------------------------------------------------------- process sets

@check
def process_sets():
    expect(PAIR.process_set_id is not None, "init(process_sets=) registered the set")
    if PAIR.included():
        x = torch.tensor([float(R + 1)])
        close(hvd.allreduce(x, op=hvd.Sum, process_set=PAIR), torch.tensor([3.0]),
              what="allreduce on ranks 0,1")
        close(hvd.allgather(torch.tensor([R]), process_set=PAIR), torch.tensor([0, 1]),
              what="allgather on ranks 0,1")
        close(hvd.broadcast(torch.tensor([R]), 1, process_set=PAIR), torch.tensor([1]),
              what="broadcast on ranks 0,1")
        expect(PAIR.rank() == R and PAIR.size() == 2, "process set rank and size")
    dyn = hvd.add_process_set([r for r in range(N) if r != 0])
    if R != 0:
        close(hvd.allreduce(torch.tensor([1.0]), op=hvd.Sum, process_set=dyn),
              torch.tensor([float(N - 1)]), what="dynamic set")
        # root_rank is a global rank, also in a set without rank 0.
        obj = hvd.broadcast_object({"from": R} if R == 1 else None, root_rank=1,
                                   process_set=dyn)
        expect(obj == {"from": 1}, f"broadcast_object in a set: {obj}")
        close(hvd.broadcast(torch.tensor([R]), 1, process_set=dyn), torch.tensor([1]),
              what="broadcast in a set without rank 0")
    hvd.remove_process_set(dyn)
    hvd.barrier()


# ---------------------------------------------------------------- training

def _data(rank, n=8):
    g = torch.Generator().manual_seed(77 + rank)
    return torch.randn(n, 5, generator=g), torch.randn(n, 1, generator=g)


def _model(seed=5):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))


def _reference_params(steps, make_opt, passes=1):
    """The parameters one process reaches training on every rank's data with
    the gradient averaged over ranks (equal batch sizes: the loss mean over
    all ranks' data)."""
    model = _model()
    opt = make_opt(model.parameters())
    for step in range(steps):
        opt.zero_grad()
        for p in range(passes):
            xs, ys = zip(*[_data(r * 100 + step * 10 + p) for r in range(N)])
            loss = torch.nn.functional.mse_loss(model(torch.cat(xs)), torch.cat(ys))
            loss.backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def _train(steps, make_opt, passes=1, **kw):
    model = _model()
    opt = hvd.DistributedOptimizer(make_opt(model.parameters()),
                                   named_parameters=model.named_parameters(), **kw)
    for step in range(steps):
        opt.zero_grad()
        for p in range(passes):
            x, y = _data(R * 100 + step * 10 + p)
            torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return model, opt


@check
def distributed_optimizer_matches_one_process():
    sgd = lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9)  # noqa: E731
    model, _ = _train(3, sgd)
    for got, want in zip(model.parameters(), _reference_params(3, sgd)):
        close(got.detach(), want, 1e-5, "SGD parameters")


@check
def distributed_optimizer_adam_backward_passes_and_predivide():
    adam = lambda ps: torch.optim.Adam(ps, lr=0.01)  # noqa: E731
    model, _ = _train(2, adam, passes=2, backward_passes_per_step=2,
                      gradient_predivide_factor=2.0)
    for got, want in zip(model.parameters(), _reference_params(2, adam, passes=2)):
        close(got.detach(), want, 1e-5, "Adam, 2 passes per step")


@check
def distributed_optimizer_compression_groups_and_sum():
    sgd = lambda ps: torch.optim.SGD(ps, lr=0.05)  # noqa: E731
    model, _ = _train(2, sgd, compression=hvd.Compression.fp16)
    for got, want in zip(model.parameters(), _reference_params(2, sgd)):
        close(got.detach(), want, 2e-3, "fp16 compression")
    model, _ = _train(2, sgd, groups=2)
    for got, want in zip(model.parameters(), _reference_params(2, sgd)):
        close(got.detach(), want, 1e-5, "groups=2")
    # op=Sum: the step uses N times the average gradient.
    sgd_n = lambda ps: torch.optim.SGD(ps, lr=0.05 * N)  # noqa: E731
    model, _ = _train(1, sgd, op=hvd.Sum)
    for got, want in zip(model.parameters(), _reference_params(1, sgd_n)):
        close(got.detach(), want, 1e-5, "op=Sum")


@check
def distributed_optimizer_synchronize_skip_and_zero_grad_rule():
    model = _model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    x, y = _data(R)
    torch.nn.functional.mse_loss(model(x), y).backward()
    try:
        opt.zero_grad()
    except AssertionError as e:
        expect("zero_grad" in str(e), str(e))
    else:
        raise AssertionError("zero_grad during pending allreduces did not raise")
    opt.synchronize()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    with opt.skip_synchronize():
        opt.step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opt.zero_grad()  # nothing pending now
    names = [n for n, _ in model.named_parameters()]
    try:
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=[(names[0], p) for p in model.parameters()])
    except ValueError as e:
        expect("duplicate" in str(e), str(e))
    else:
        raise AssertionError("duplicate names accepted")


@check
def distributed_optimizer_sparse_gradients():
    for as_dense in (False, True):
        torch.manual_seed(3)
        emb = torch.nn.Embedding(10, 3, sparse=True)
        ref = torch.nn.Embedding(10, 3, sparse=True)
        ref.load_state_dict(emb.state_dict())
        opt = hvd.DistributedOptimizer(torch.optim.SGD(emb.parameters(), lr=0.5),
                                       named_parameters=emb.named_parameters(),
                                       sparse_as_dense=as_dense)
        emb(torch.tensor([R, R + 1, 7])).sum().backward()
        opt.step()
        ids = torch.cat([torch.tensor([r, r + 1, 7]) for r in range(N)])
        (ref(ids).sum() / N).backward()
        with torch.no_grad():
            ref.weight -= 0.5 * ref.weight.grad.to_dense()
        close(emb.weight.detach(), ref.weight.detach(), 1e-6, f"sparse_as_dense={as_dense}")


@check
def broadcast_parameters_and_optimizer_state():
    torch.manual_seed(100 + R)  # every rank starts elsewhere
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.BatchNorm1d(3))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    if R == 0:  # only the root has stepped: its Adam state exists
        model(torch.randn(4, 3)).sum().backward()
        opt.step()
        opt.param_groups[0]["lr"] = 0.123
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0, model=model)
    flat = torch.cat([t.detach().double().reshape(-1) for t in model.state_dict().values()])
    gathered = hvd.allgather(flat.reshape(1, -1))
    expect(all(torch.equal(gathered[0], gathered[r]) for r in range(N)),
           "parameters differ after broadcast_parameters")
    expect(opt.param_groups[0]["lr"] == 0.123, f"lr {opt.param_groups[0]['lr']}")
    state = opt.state_dict()["state"]
    expect(len(state) == 4, f"optimizer state has {len(state)} entries")
    moments = torch.cat([state[k]["exp_avg"].reshape(-1) for k in sorted(state)])
    gathered = hvd.allgather(moments.reshape(1, -1))
    expect(all(torch.equal(gathered[0], gathered[r]) for r in range(N)),
           "Adam moments differ after broadcast_optimizer_state")
    hvd.broadcast_parameters(model.parameters(), root_rank=N - 1)  # bare tensors
    last = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = hvd.allgather(last.reshape(1, -1))
    expect(all(torch.equal(gathered[0], gathered[r]) for r in range(N)),
           "parameters differ after broadcast_parameters(model.parameters())")


def _every_torch_optimizer():
    """Horovod's broadcast_state tests run every torch.optim optimizer but
    L-BFGS and SparseAdam (and Muon here, which takes 2-D parameters only)."""
    skip = {"LBFGS", "SparseAdam", "Muon"}
    return sorted(((c.__name__, c) for c in torch.optim.Optimizer.__subclasses__()
                   if c.__module__.startswith("torch.optim") and c.__name__ not in skip),
                  key=lambda nc: nc[0])


def _horovod_optimizer(cls, options, model, named):
    args = inspect.getfullargspec(cls.__init__).args
    opt = cls(model.parameters(), **{k: v for k, v in options.items() if k in args})
    if named:
        return hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    return hvd.DistributedOptimizer(opt)


_OPTIONS = [dict(lr=0.1, momentum=0.8, weight_decay=0.2, nesterov=True, betas=(0.9, 0.999),
                 etas=(0.8, 2.4), step_sizes=(1e-5, 100)),
            dict(lr=0.2, momentum=0.9, weight_decay=0.1, nesterov=False, betas=(0.8, 0.9),
                 etas=(0.25, 1.75), step_sizes=(1e-7, 5))]


@check
def broadcast_state_options_and_objects_as_horovods_tests():
    """Every optimizer, with named_parameters and without: rank 0's options
    (floats, bools, tuples) and state reach every rank with their types and
    the optimizer steps on; broadcast_object on nested dicts and scalars."""
    for obj in ({"hello": 123, 0: [1, 2]}, {"a": {"b": [1, {"c": (2.5, None)}]}}, 3.5, 7,
                True, (0.9, 0.999), "text"):
        got = hvd.broadcast_object(obj if R == 0 else {}, root_rank=0)
        expect(got == obj and type(got) is type(obj), f"broadcast_object {obj!r}: {got!r}")
    torch.manual_seed(21)
    x, y = torch.randn(16, 12), torch.randn(16, 4)
    for name, cls in _every_torch_optimizer():
        for named in (True, False):
            model = torch.nn.Sequential(torch.nn.Linear(12, 6), torch.nn.ReLU(),
                                        torch.nn.Linear(6, 4))
            opt = _horovod_optimizer(cls, _OPTIONS[min(R, 1)], model, named)
            for _ in range(2):
                opt.zero_grad()
                torch.nn.functional.mse_loss(model(x), y, reduction="sum").backward()
                opt.step()
                hvd.broadcast_optimizer_state(opt, root_rank=0)
                args = inspect.getfullargspec(cls.__init__).args
                for k, want in _OPTIONS[0].items():
                    if k not in args:
                        continue
                    got = opt.param_groups[0][k]
                    pairs = zip(got, want) if isinstance(want, tuple) else [(got, want)]
                    for g, w in pairs:
                        expect(type(g) is type(w) and abs(g - w) < 1e-5,
                               f"{name} named={named} {k}: {got!r}, rank 0 has {want!r}")
            state = [[(k, v.tolist() if torch.is_tensor(v) else v) for k, v in sorted(st.items())]
                     for st in opt.state_dict()["state"].values()]
            everyone = hvd.allgather_object(state)
            expect(all(e == everyone[0] for e in everyone), f"{name} named={named}: state")


@check
def distributed_optimizer_without_names_and_unused_parameters():
    """Horovod's test_force_allreduce: ranks use different outputs, so some
    parameters get no gradient on some ranks; their allreduce runs anyway."""
    torch.manual_seed(22)
    x, y = torch.randn(8, 12), torch.randn(8, 4)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(12, 6), torch.nn.Linear(6, 4)
            self.fc3 = torch.nn.Linear(4, 4)

        def forward(self, t):
            t1 = self.fc2(torch.relu(self.fc1(t)))
            return t1, self.fc3(torch.relu(t1))

    for name, cls in _every_torch_optimizer():
        for named in (True, False):
            model = Net()
            hvd.broadcast_parameters(model.state_dict(), root_rank=0)
            opt = _horovod_optimizer(cls, dict(lr=0.2), model, named)
            for _ in range(2):
                out1, out2 = model(x)
                opt.zero_grad()
                torch.nn.functional.mse_loss(out1 if R == 0 else out2, y).backward()
                opt.step()
            params = [p.detach().clone() for p in model.parameters()]
            for r, theirs in enumerate(hvd.allgather_object(params)):
                expect(all(torch.equal(a, b) for a, b in zip(params, theirs)),
                       f"{name} named={named}: rank {r}'s parameters differ")


@check
def sync_batch_norm_matches_one_process():
    for dims in ([4, 3], [2, 3, 5]):
        torch.manual_seed(9)
        bn = hvd.SyncBatchNorm(3, momentum=0.3).double()
        ref = torch.nn.BatchNorm1d(3, momentum=0.3).double()
        with torch.no_grad():
            bn.weight.copy_(torch.tensor([1.0, 2.0, 0.5]))
            ref.weight.copy_(bn.weight)
        xs = [value(r, [r + 2] + dims[1:], torch.float64).requires_grad_() for r in range(N)]
        mine = xs[R].detach().clone().requires_grad_()
        y = bn(mine)
        (y * torch.arange(y.numel(), dtype=torch.float64).reshape(y.shape)).sum().backward()
        yr = ref(torch.cat(xs))
        weights = torch.cat([torch.arange(x.numel(), dtype=torch.float64).reshape(x.shape)
                             for x in xs])
        (yr * weights).sum().backward()
        start = sum(r + 2 for r in range(R))
        close(y.detach(), yr.detach()[start:start + R + 2], 1e-6, f"SyncBN output {dims}")
        close(mine.grad, xs[R].grad, 1e-6, f"SyncBN input grad {dims}")
        close(bn.running_mean, ref.running_mean, 1e-6, f"running mean {dims}")
        close(bn.running_var, ref.running_var, 1e-6, f"running var {dims}")
        bn.eval()
        ref.eval()
        close(bn(mine.detach()), ref(mine.detach()), 1e-6, "eval mode")


@check
def timeline_restarts_at_a_new_path():
    out = os.environ["KOLO_TEST_OUT"]
    first, second = os.path.join(out, "torch_first.json"), os.path.join(out, "torch_second.json")
    hvd.start_timeline(first)
    hvd.allreduce(torch.ones(2), name="torch.timeline.before")
    hvd.barrier()  # "before" ran everywhere before the restart
    hvd.start_timeline(second)  # restarts: what was recorded is dropped
    for i in range(3):
        close(hvd.allreduce(torch.full([3], float(R)), op=hvd.Sum, name=f"torch.timeline.{i}"),
              torch.full([3], float(N * (N - 1) / 2)), what="allreduce while recording")
    hvd.stop_timeline()
    try:
        hvd.stop_timeline()
    except ValueError as e:
        expect("start_timeline" in str(e), str(e))
    else:
        raise AssertionError("a second stop_timeline did not raise")
    hvd.barrier()  # rank 0 has written the file
    if R == 0:
        expect(not os.path.exists(first), "the restarted timeline wrote the first path")
        trace = read_trace(second)
        expect(sorted(trace.names_by_tid) == list(range(N)),
               f"rows {sorted(trace.names_by_tid)}, want one per rank")
        trace.expect_tensors([f"torch.timeline.{i}" for i in range(3)], range(N))
        for r, names in trace.names_by_tid.items():
            expect(not any("before" in n for n in names), f"rank {r} kept {sorted(names)}")


@check
def join_then_broadcast_raises_on_the_ranks_that_did_not_join():
    # Horovod's test_horovod_join_broadcast: rank `joiner` joins, the others'
    # broadcast raises on each of them, then they join too and the job goes
    # on. Once with a root that did not join (Horovod's case), once with the
    # joined rank as root.
    for joiner, root in [(0, 1), (N - 1, N - 1)]:
        name = f"torch.join.bcast.{joiner}.{root}"
        if R != joiner:
            try:
                hvd.broadcast(torch.full([3], float(R)), root, name=name)
            except hvd.KoloError as e:
                msg = str(e)
                expect(type(e).__name__ == "FailedPreconditionError", f"{type(e).__name__}: {msg}")
                expect(name in msg and "broadcast does not run with joined ranks" in msg
                       and f"rank {joiner} has joined" in msg, msg)
            else:
                raise AssertionError(f"broadcast with rank {joiner} joined did not raise on {R}")
        last = hvd.join()
        expect(last != joiner, f"join returned {last}, the rank that joined first")
        close(hvd.allreduce(torch.full([2], float(R + 1)), op=hvd.Sum, name=f"{name}.after"),
              torch.full([2], float(N * (N + 1) // 2)), what="allreduce after everyone joined")
        close(hvd.broadcast(torch.full([2], float(R)), root, name=f"{name}.again"),
              torch.full([2], float(root)), what="broadcast after everyone joined")


@check
def join_last():
    if R != 0:
        close(hvd.allreduce(torch.ones(2), op=hvd.Sum, name="torch.after.join"),
              torch.full([2], float(N - 1)), what="allreduce beside a joined rank")
    last = hvd.join()
    expect(0 <= last < N, f"{last}")


# Last: they end the job and form it again (process sets of the first init,
# such as PAIR, are gone afterwards).
@check
def shutdown_then_init_forms_the_job_again():
    for cycle in range(3):
        close(hvd.allreduce(torch.full([3], float(R + 1)), op=hvd.Sum, name="torch.reinit"),
              torch.full([3], float(N * (N + 1) // 2)), what=f"allreduce in incarnation {cycle}")
        # Ranks reach shutdown at different times: the first to attach again
        # starts the next incarnation while the others still leave the last.
        time.sleep(0.1 * ((R + cycle) % N))
        hvd.shutdown()
        expect(not hvd.is_initialized(), f"is_initialized after shutdown #{cycle}")
        hvd.init()
        expect(hvd.is_initialized(), f"is_initialized after init #{cycle}")
        expect((hvd.rank(), hvd.size()) == (R, N), f"rank/size {hvd.rank()}/{hvd.size()}")
    close(hvd.broadcast(torch.full([2], float(R)), 1, name="torch.reinit.bcast"),
          torch.full([2], 1.0), what="broadcast after the last init")


@check
def a_rank_shutting_down_mid_collective_fails_the_others_then_all_init_again():
    hvd.barrier()
    if R == 0:
        hvd.shutdown()  # never submits torch.reinit.orphan
    else:
        try:
            hvd.allreduce(torch.ones(4), name="torch.reinit.orphan")
        except Exception as e:  # noqa: BLE001 - the error's text is checked
            expect("rank 0 has shut down" in str(e), f"unclear error: {type(e).__name__}: {e}")
        else:
            raise AssertionError("an allreduce that needed a rank that shut down succeeded")
        hvd.shutdown()
    hvd.init()
    close(hvd.allreduce(torch.full([4], float(R)), op=hvd.Sum, name="torch.reinit.orphan"),
          torch.full([4], float(N * (N - 1) // 2)), what="the name again in the new incarnation")


run(hvd.rank)
hvd.shutdown()
