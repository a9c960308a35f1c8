"""Checks of the kolo NumPy API, run on every rank (see harness.py)."""

import numpy as np

import kolo
from harness import check, run

kolo.init()
R, N = kolo.rank(), kolo.size()


def expect(cond, msg):
    if not cond:
        raise AssertionError(msg)


def close(a, b, msg=""):
    np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64),
                               rtol=1e-5, atol=1e-6, err_msg=msg)


@check
def topology():
    expect(kolo.is_initialized(), "not initialized")
    expect(0 <= R < N, f"rank {R} size {N}")
    expect(kolo.local_size() == N and kolo.local_rank() == R, "local rank/size")


@check
def allreduce_ops():
    x = np.arange(12, dtype=np.float32).reshape(3, 4) + R
    ranks = [np.arange(12, dtype=np.float32).reshape(3, 4) + r for r in range(N)]
    close(kolo.allreduce(x, op=kolo.Sum), sum(ranks))
    close(kolo.allreduce(x), sum(ranks) / N)  # Average is the default
    close(kolo.allreduce(x, op=kolo.Min), ranks[0])
    close(kolo.allreduce(x, op=kolo.Max), ranks[-1])
    close(kolo.allreduce(x + 1, op=kolo.Product), np.prod([r + 1 for r in ranks], axis=0))
    close(kolo.allreduce(x, average=False), sum(ranks))


@check
def allreduce_dtypes():
    for dt in ["uint8", "int8", "int16", "uint16", "int32", "int64", "float16", "float32",
               "float64"]:
        y = kolo.allreduce(np.full([5], R + 1, dtype=dt), op=kolo.Sum)
        expect(y.dtype == np.dtype(dt), f"{dt}: got {y.dtype}")
        expect((y == N * (N + 1) // 2).all(), f"{dt}: {y}")


@check
def bool_reduces_logically():
    # Any byte but 0 is True (seen here through a uint8 view); results are 0/1.
    raw = np.array([0, 0x80 if R == 0 else 0, 2, 0xFF if R == N - 1 else 1], np.uint8)
    x = raw.view(np.bool_)
    any_ = np.array([False, True, True, True])
    all_ = np.array([False, N == 1, True, True])
    for op, want in [(kolo.Sum, any_), (kolo.Max, any_), (kolo.Min, all_), (kolo.Product, all_)]:
        y = kolo.allreduce(x, op=op)
        expect(y.dtype == np.bool_ and (y == want).all(), f"bool {op!r}: {y}")
        expect(set(y.view(np.uint8).tolist()) <= {0, 1}, f"bool {op!r} bytes: {y.view(np.uint8)}")
    try:
        kolo.allreduce(x)  # Average is the default
    except kolo.InvalidArgumentError as e:
        expect("bool" in str(e), str(e))
    else:
        raise AssertionError("bool average accepted")
    y = kolo.broadcast(x, N - 1)
    expect((y == np.array([False, N == 1, True, True])).all(), f"bool broadcast: {y}")
    g = kolo.allgather(np.full([1], R % 2 == 1, np.bool_))
    expect((g == (np.arange(N) % 2 == 1)).all(), f"bool allgather: {g}")


@check
def allreduce_scale_factors():
    x = np.ones([4], np.float64) * (R + 1)
    y = kolo.allreduce(x, op=kolo.Sum, prescale_factor=2.0, postscale_factor=0.5)
    close(y, np.full([4], N * (N + 1) / 2))
    y = kolo.allreduce(x, op=kolo.Average, postscale_factor=3.0)
    close(y, np.full([4], 3.0 * (N + 1) / 2))


@check
def allreduce_compression():
    x = np.linspace(-1, 1, 64, dtype=np.float32) * (R + 1)
    want = np.linspace(-1, 1, 64) * N * (N + 1) / 2
    for c in (kolo.Compression.fp16, kolo.Compression.bf16):
        y = kolo.allreduce(x, op=kolo.Sum, compression=c)
        expect(y.dtype == np.float32, f"{c}: dtype {y.dtype}")
        np.testing.assert_allclose(y, want, rtol=2e-2, atol=2e-2)


@check
def allreduce_async_handles():
    handles = [kolo.allreduce_async(np.full([3], R + i, np.float32), op=kolo.Sum,
                                    name=f"async.{i}") for i in range(4)]
    for i, h in enumerate(reversed(handles)):
        i = 3 - i
        out = kolo.synchronize(h) if i % 2 else h.wait()
        close(out, np.full([3], sum(r + i for r in range(N))))
        expect(h.poll(), "a waited handle polls done")
    h = kolo.allreduce_async(np.ones([2]))
    while not kolo.poll(h):
        pass
    close(h.wait(), np.ones([2]))


@check
def allreduce_empty_and_scalar():
    expect(kolo.allreduce(np.zeros([0, 3], np.float32)).shape == (0, 3), "empty shape")
    close(kolo.allreduce(np.float64(R), op=kolo.Sum), N * (N - 1) / 2)


@check
def grouped_allreduce():
    outs = kolo.grouped_allreduce([np.full([2], R, np.float32), np.full([3, 1], 1, np.int64)],
                                  op=kolo.Sum)
    close(outs[0], np.full([2], N * (N - 1) / 2))
    expect(outs[1].dtype == np.int64 and (outs[1] == N).all(), f"{outs[1]}")
    h = kolo.grouped_allreduce_async([np.ones([4]) * R])
    close(h.wait()[0], np.full([4], (N - 1) / 2))


@check
def broadcast():
    for root in range(N):
        x = np.arange(6, dtype=np.int32) * (R + 1)
        y = kolo.broadcast(x, root)
        expect((y == np.arange(6) * (root + 1)).all(), f"root {root}: {y}")
        expect((x == np.arange(6) * (R + 1)).all(), "broadcast changed its input")
    z = np.full([3], R, np.float64)
    kolo.broadcast_(z, N - 1)
    close(z, np.full([3], N - 1))
    close(kolo.broadcast_async(np.full([2], R, np.float32), 0).wait(), np.zeros([2]))


@check
def allgather():
    x = np.full([R + 1, 2], R, np.int32)
    y = kolo.allgather(x)
    want = np.concatenate([np.full([r + 1, 2], r, np.int32) for r in range(N)])
    expect(y.shape == want.shape and (y == want).all(), f"got {y.tolist()}")
    h = kolo.allgather_async(np.array([R], np.float32))
    close(h.wait(), np.arange(N))


@check
def grouped_allgather():
    a, b = kolo.grouped_allgather([np.full([1], R, np.int64), np.full([R + 1], 1.5, np.float32)])
    expect((a == np.arange(N)).all(), f"{a}")
    expect(b.shape == (N * (N + 1) // 2,) and (b == 1.5).all(), f"{b}")


@check
def reducescatter():
    rows = 2 * N + 1  # uneven: lower ranks take one extra row
    x = np.arange(rows * 2, dtype=np.float32).reshape(rows, 2) * (R + 1)
    total = np.arange(rows * 2, dtype=np.float32).reshape(rows, 2) * (N * (N + 1) / 2)
    counts = [rows // N + (1 if r < rows % N else 0) for r in range(N)]
    start = sum(counts[:R])
    y = kolo.reducescatter(x, op=kolo.Sum)
    close(y, total[start:start + counts[R]])
    y = kolo.reducescatter(x)  # Average
    close(y, total[start:start + counts[R]] / N)


@check
def grouped_reducescatter():
    outs = kolo.grouped_reducescatter([np.ones([N, 3], np.float32), np.ones([2 * N], np.float64)],
                                      op=kolo.Sum)
    close(outs[0], np.full([1, 3], N))
    close(outs[1], np.full([2], N))


@check
def alltoall():
    # Rank R sends j+1 rows of value 100*R+j to rank j.
    splits = [j + 1 for j in range(N)]
    x = np.concatenate([np.full([j + 1, 2], 100 * R + j, np.int64) for j in range(N)])
    out, received = kolo.alltoall(x, splits=splits)
    expect(list(received) == [R + 1] * N, f"received splits {received}")
    want = np.concatenate([np.full([R + 1, 2], 100 * r + R, np.int64) for r in range(N)])
    expect(out.shape == want.shape and (out == want).all(), f"got {out.tolist()}")
    out, received = kolo.alltoall(np.arange(N, dtype=np.float32) + 10 * R)
    close(out, [10 * r + R for r in range(N)])
    expect(list(received) == [1] * N, f"{received}")


@check
def barrier():
    kolo.barrier()
    kolo.barrier()


@check
def process_sets():
    ps = kolo.add_process_set([0, 1])
    try:
        if ps.included():
            expect(ps.size() == 2 and ps.rank() == R, f"set rank {ps.rank()} size {ps.size()}")
            y = kolo.allreduce(np.full([2], R + 1, np.float32), op=kolo.Sum, process_set=ps)
            close(y, np.full([2], 3))
            kolo.barrier(process_set=ps)
    finally:
        kolo.remove_process_set(ps)


@check
def mismatch_raises_failed_precondition():
    try:
        kolo.allreduce(np.ones([2 + R], np.float32), name="mismatch.shape")
    except kolo.FailedPreconditionError as e:
        expect("mismatch.shape" in str(e), f"message does not name the tensor: {e}")
        expect(isinstance(e, kolo.KoloError) and e.code == 9, "error class")
    else:
        raise AssertionError("no error for mismatched shapes")
    try:
        kolo.broadcast(np.ones([2]), root_rank=R, name="mismatch.root")
    except kolo.KoloError as e:
        expect("mismatch.root" in str(e), f"{e}")
    else:
        raise AssertionError("no error for mismatched roots")


@check
def unsupported_dtype_raises():
    try:
        kolo.allreduce(np.ones([2], np.complex64))
    except TypeError as e:
        expect("complex64" in str(e), str(e))
    else:
        raise AssertionError("complex64 accepted")


@check
def a_collective_one_rank_refuses_fails_on_every_rank():
    # The last rank's own checks refuse each of these; the other ranks' ops
    # of the same name fail with its reason instead of waiting for it.
    last = R == N - 1
    calls = {
        "dtype": lambda: kolo.allreduce(np.ones([2], np.complex64 if last else np.float32),
                                        op=kolo.Sum),
        "root": lambda: kolo.broadcast(np.ones([2], np.float32), root_rank=N + 5 if last else 0),
        "group": lambda: kolo.grouped_allgather(
            [np.ones([2], np.float32), np.ones([1], np.complex64 if last else np.float32)]),
    }
    for what, call in calls.items():
        try:
            call()
        except kolo.FailedPreconditionError as e:
            expect(not last and f"rank {N - 1} refused it" in str(e), f"{what} on {R}: {e}")
        except (TypeError, kolo.InvalidArgumentError) as e:
            expect(last, f"{what} refused on rank {R}: {e}")
        else:
            raise AssertionError(f"{what}: no error on rank {R}")
    # Unnamed collectives still match up afterwards.
    close(kolo.allreduce(np.ones([3], np.float32) * R, op=kolo.Sum), np.full([3], N * (N - 1) / 2))


class FakeCudaArray:
    """Host memory dressed as a CUDA array: kolo takes the device path, and
    since no GPU holds it (or libkolo has no CUDA) the SDK refuses it before
    kolod sees it."""

    def __init__(self, array, strides=None, readonly=False, device=0):
        self.host = array
        self.device = type("Device", (), {"index": device})()
        self.__cuda_array_interface__ = {
            "shape": array.shape, "typestr": array.dtype.str,
            "data": (array.ctypes.data, readonly), "strides": strides,
            "version": 3, "stream": None,
        }

    def clone(self):
        return FakeCudaArray(self.host.copy())


@check
def in_place_allreduce():
    x = np.full([3], R + 1, np.float32)
    y = kolo.allreduce_(x, op=kolo.Sum, name="inplace.sum")
    expect(y is x, "allreduce_ returns its argument")
    close(x, np.full([3], N * (N + 1) / 2))


@check
def cuda_arrays_take_the_device_path():
    x = np.ones([4], np.float32)
    for fn in (lambda: kolo.allreduce_(FakeCudaArray(x), name="cuda.fake"),
               lambda: kolo.allreduce(FakeCudaArray(x), name="cuda.fake2"),
               lambda: kolo.broadcast_(FakeCudaArray(x), 0, name="cuda.fakeb"),
               lambda: kolo.grouped_allreduce([FakeCudaArray(x), FakeCudaArray(x)],
                                              name="cuda.fakeg")):
        try:
            fn()
        except kolo.KoloError as e:
            expect(str(e), "the refusal says why")
        else:
            raise AssertionError("host memory accepted as a CUDA array")
    try:
        kolo.allreduce_(FakeCudaArray(np.ones([2, 2], np.float32), strides=(4, 8)))
    except ValueError as e:
        expect("C-contiguous" in str(e), str(e))
    else:
        raise AssertionError("a strided CUDA array was accepted")
    try:
        kolo.allreduce_(FakeCudaArray(np.ones([2], np.complex64)))
    except TypeError as e:
        expect("complex64" in str(e), str(e))
    else:
        raise AssertionError("complex64 accepted")
    try:
        kolo.allreduce_(FakeCudaArray(x, readonly=True))
    except ValueError as e:
        expect("read-only" in str(e), str(e))
    else:
        raise AssertionError("a read-only CUDA array was accepted")
    # The session goes on working.
    close(kolo.allreduce(np.ones([2], np.float32), op=kolo.Sum, name="after.cuda"),
          np.full([2], N))


@check
def join():
    # Rank 0 joins at once; the others allreduce once more first, to which
    # the joined rank contributes zeros.
    if R != 0:
        y = kolo.allreduce(np.ones([2], np.float32), op=kolo.Sum, name="after.join")
        close(y, np.full([2], N - 1))
    last = kolo.join()
    expect(0 <= last < N, f"last rank {last}")


run(kolo.rank)
kolo.shutdown()
