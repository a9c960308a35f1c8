"""Kolo's Python SDK with GPU tensors, for the device check.

Run by examples/gpu/device_check.sh under kolorun (2 ranks on GPU 0):
  - kolo.torch with CUDA tensors: allreduce (sum, average, in place, with a
    postscale), grouped allreduce, broadcast, allgather and reducescatter on
    the device, and alltoall (through host memory), each result checked
    against the value computed here;
  - kolo's own API with __cuda_array_interface__ arrays (CuPy where it is
    installed, and PyTorch tensors through the same interface).
Prints one line per check and "PASS python-device" or raises.
"""

import sys

import torch

import kolo
import kolo.torch as kt


def check(what, got, want, atol=1e-5):
    got_cpu = torch.as_tensor(got).detach().to("cpu", torch.float64)
    want_cpu = torch.as_tensor(want).detach().to("cpu", torch.float64)
    if got_cpu.shape != want_cpu.shape or not torch.allclose(got_cpu, want_cpu, atol=atol):
        raise AssertionError(f"{what}: got {got_cpu.flatten()[:8]} want {want_cpu.flatten()[:8]}")
    print(f"ok {what}", flush=True)


VMM_PROBE = """
import torch, kolo.torch as kt
kt.init()
t = torch.ones(1 << 20, device="cuda")
try:
    kt.allreduce(t, name="vmm")
except Exception as e:
    print("refused:", e)
else:
    print("accepted")
"""


def vmm_probe():
    """Which mechanism carries device tensors, and what happens to memory from
    CUDA's virtual memory API (PyTorch's expandable segments), which has no
    legacy IPC handle: a one-rank job of its own, so the others are not
    involved."""
    import os
    import subprocess
    print("mechanism: legacy CUDA IPC (cudaIpcGetMemHandle / cudaIpcOpenMemHandle)", flush=True)
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True",
               KOLO_JOB_ID="vmm-probe", KOLO_RANK="0", KOLO_SIZE="1", KOLO_LOCAL_RANK="0",
               KOLO_LOCAL_SIZE="1")
    out = subprocess.run([sys.executable, "-c", VMM_PROBE], env=env, capture_output=True,
                         text=True, timeout=60)
    text = (out.stdout + out.stderr).strip()
    print(f"expandable_segments tensor: {text[-600:]}", flush=True)
    if "refused:" in text and "legacy CUDA IPC" not in text:
        raise AssertionError("the refusal of a VMM tensor does not say why")


def main():
    kt.init()
    rank, size = kt.rank(), kt.size()
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    n = 1 << 20
    base = torch.arange(n, dtype=torch.float32, device=dev) % 1024 / 1024

    def mine(r):
        return base + (r + 1)

    total = sum(mine(r) for r in range(size))

    # kolo.torch: device allreduce through kolod (CUDA IPC, NCCL backend).
    check("torch allreduce sum", kt.allreduce(mine(rank), op=kt.Sum, name="t.sum"), total)
    check("torch allreduce average", kt.allreduce(mine(rank), name="t.avg"), total / size)
    t = mine(rank).clone()
    kt.allreduce_(t, op=kt.Sum, name="t.inplace")
    check("torch allreduce_ in place", t, total)
    check("torch allreduce postscale",
          kt.allreduce(mine(rank), op=kt.Sum, postscale_factor=0.5, name="t.post"), total * 0.5)
    half = kt.allreduce(mine(rank).half(), op=kt.Sum, name="t.f16")
    check("torch allreduce float16", half.float(), total.half().float(), atol=1e-2)
    ints = kt.allreduce(torch.full((1000,), rank + 1, dtype=torch.int32, device=dev), op=kt.Sum,
                        name="t.i32")
    check("torch allreduce int32", ints, torch.full((1000,), size * (size + 1) // 2))
    # One group, fused by kolod on the device (one response of two members).
    outs = kt.grouped_allreduce([mine(rank), mine(rank)[:1000] * 2], op=kt.Sum, name="t.group")
    check("torch grouped allreduce [0]", outs[0], total)
    check("torch grouped allreduce [1]", outs[1], total[:1000] * 2)
    b = mine(rank).clone()
    kt.broadcast_(b, root_rank=1, name="t.bcast")
    check("torch broadcast_ from rank 1", b, mine(1))
    # Allgather and reducescatter on the device (alltoall passes through host
    # memory: kolod has no device path for it yet).
    uneven = kt.allgather(torch.full((rank + 1, 2), rank, dtype=torch.int64, device=dev),
                          name="t.gather.uneven")
    check("torch allgather of uneven rows (device)", uneven,
          torch.cat([torch.full((r + 1, 2), r, dtype=torch.int64) for r in range(size)]))
    rs_rows = size * 3 + 1
    rs_in = (torch.arange(rs_rows * 2, dtype=torch.float32, device=dev).reshape(rs_rows, 2)
             * (rank + 1))
    rs_full = torch.arange(rs_rows * 2, dtype=torch.float32).reshape(rs_rows, 2) * (
        size * (size + 1) / 2)
    first = rank * (rs_rows // size) + min(rank, rs_rows % size)
    mine_rows = rs_rows // size + (1 if rank < rs_rows % size else 0)
    rs_avg = kt.reducescatter(rs_in, op=kt.Average, name="t.rscatter.avg")
    check("torch reducescatter average of uneven rows (device)", rs_avg,
          rs_full[first:first + mine_rows] / size)
    if rs_avg.device != dev:
        raise AssertionError(f"reducescatter result on {rs_avg.device}, want {dev}")
    g = kt.allgather(torch.full((2, 3), float(rank), device=dev), name="t.gather")
    check("torch allgather (device tensor)", g,
          torch.cat([torch.full((2, 3), float(r)) for r in range(size)]))
    if g.device != dev:
        raise AssertionError(f"allgather result on {g.device}, want {dev}")
    rs = kt.reducescatter(torch.ones(size * 4, device=dev) * (rank + 1), op=kt.Sum,
                          name="t.rscatter")
    check("torch reducescatter (device tensor)", rs,
          torch.ones(4) * (size * (size + 1) // 2))
    a2a = kt.alltoall(torch.arange(size, dtype=torch.float32, device=dev) + 10 * rank,
                      name="t.a2a")
    check("torch alltoall (device tensor)", a2a,
          torch.tensor([10.0 * r + rank for r in range(size)]))

    # kolo's API with __cuda_array_interface__ arrays.
    kolo.init()
    x = mine(rank).clone()
    kolo.allreduce_(x, op=kolo.Sum, name="cai.torch")
    check("kolo.allreduce_ on a torch tensor (__cuda_array_interface__)", x, total)
    try:
        import cupy
    except ImportError:
        print("skip cupy: not installed", flush=True)
    else:
        with cupy.cuda.Device(0):
            c = cupy.asarray(mine(rank).cpu().numpy())
            kolo.allreduce_(c, op=kolo.Sum, name="cai.cupy")
            check("kolo.allreduce_ on a CuPy array", torch.as_tensor(cupy.asnumpy(c)), total)
            g1, g2 = kolo.grouped_allreduce(
                [cupy.asarray(mine(rank).cpu().numpy()), cupy.full((5,), rank + 1.0)],
                op=kolo.Sum, name="cai.cupy.group")
            check("kolo.grouped_allreduce on CuPy arrays [0]", torch.as_tensor(cupy.asnumpy(g1)),
                  total)
            check("kolo.grouped_allreduce on CuPy arrays [1]", torch.as_tensor(cupy.asnumpy(g2)),
                  torch.full((5,), float(size * (size + 1) // 2)))
            cb = cupy.full((17,), rank, dtype=cupy.int64)
            kolo.broadcast_(cb, root_rank=0, name="cai.cupy.bcast")
            check("kolo.broadcast_ on a CuPy array", torch.as_tensor(cupy.asnumpy(cb)),
                  torch.zeros(17))
    torch.cuda.synchronize()
    if rank == 0:
        vmm_probe()
    kt.shutdown()
    print("PASS python-device", flush=True)


if __name__ == "__main__":
    sys.exit(main())
