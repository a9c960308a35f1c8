"""ResNet-50's per-step gradient exchange through kolo.torch and through
PyTorch's DistributedDataParallel on the gloo backend, in one run.

    kolorun -np 2 -- python examples/bench/torch_ddp_compare.py [--steps 20] [--warmup 3]

The model has exactly ResNet-50's parameters (161 float32 tensors, 25.6 M
values, the shapes examples/bench/resnet50_shapes.cc lists) and next to no
compute: its forward adds one scalar per parameter in creation order, and its
backward writes each parameter's gradient (the parameter times the rank's
scalar input) last to first, the order a real backward pass produces them. So
a step (zero_grad, forward, backward, optimizer.step with SGD at learning
rate 0) measures the gradient exchange and the memory traffic of writing the
gradients, which a "compute only" row (the same step with no exchange) shows
on its own.

Compared in the same processes (both use hvd.rank()/hvd.size()):
  kolo      kolo.torch.DistributedOptimizer (a hook per parameter submits its
            allreduce as soon as its gradient is ready; kolod fuses them);
  DDP+gloo  torch.nn.parallel.DistributedDataParallel on the gloo backend with
            its default buckets.
Each path runs twice (kolo, DDP, then DDP, kolo), warmup steps then timed
steps each time; a step's time is the slowest rank's. Before timing, one step
from the same parameters and inputs checks that both paths produce the same
averaged gradients.

Steps run in both of PyTorch's ways to clear gradients (--zero_grad):
  none   zero_grad(set_to_none=True), PyTorch's default: backward allocates
         fresh gradients every step;
  zeros  zero_grad(set_to_none=False): gradients stay allocated and backward
         accumulates into them (with kolo.torch, into their buffers in kolod's
         shared memory, so the exchange copies nothing in or out).
Unless --no-keep_freed_memory, each process tells glibc to keep freed memory
(mallopt: mmap and trim thresholds) instead of returning it to the kernel, so
freshly allocated gradients do not page-fault on every step; this applies to
every path alike, including the compute-only row.

Rank 0 prints a table per mode and a line per mode for scripts:
  RESULT zero_grad=<mode> kolo_ms=<median> ddp_gloo_ms=<median> ratio=<ddp/kolo>
    exchange_ratio=<(ddp - compute)/(kolo - compute)> equal_gradients=<0|1>
Nothing about speed is asserted.
"""

import argparse
import ctypes
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import kolo.torch as hvd


# ---------------------------------------------------------------- shapes

# ResNet-50 (torchvision layout): a 7x7 stem, four stages of bottleneck blocks
# (blocks, width), each block 1x1 -> 3x3 -> 1x1 convolutions with batch norm,
# the first block of a stage with a projection shortcut, then the classifier.
_STAGES = ((3, 64), (4, 128), (6, 256), (3, 512))
_EXPANSION = 4


def resnet50_shapes():
    """[(name, shape)] of ResNet-50's parameters in creation (forward) order;
    a backward pass produces their gradients in the reverse order."""
    shapes = []

    def conv_bn(conv, bn, out, inp, kernel):
        shapes.append((f"{conv}.weight", (out, inp, kernel, kernel)))
        shapes.append((f"{bn}.weight", (out,)))
        shapes.append((f"{bn}.bias", (out,)))

    conv_bn("conv1", "bn1", 64, 3, 7)
    inp = 64
    for s, (blocks, width) in enumerate(_STAGES):
        out = width * _EXPANSION
        for b in range(blocks):
            block = f"layer{s + 1}.{b}."
            conv_bn(block + "conv1", block + "bn1", width, inp, 1)
            conv_bn(block + "conv2", block + "bn2", width, width, 3)
            conv_bn(block + "conv3", block + "bn3", out, width, 1)
            if b == 0:
                conv_bn(block + "downsample.0", block + "downsample.1", out, inp, 1)
            inp = out
    shapes.append(("fc.weight", (1000, inp)))
    shapes.append(("fc.bias", (1000,)))
    return shapes


# ---------------------------------------------------------------- model

class _Emit(torch.autograd.Function):
    """A scalar in the forward pass (no work on the parameter); in backward,
    the gradient `param * x * grad_out`, a fresh contiguous tensor that
    autograd stores as param.grad without another copy."""

    @staticmethod
    def forward(ctx, param, x):
        ctx.save_for_backward(param, x)
        return x * 1.0

    @staticmethod
    def backward(ctx, grad_out):
        param, x = ctx.saved_tensors
        return param * (x * grad_out), None


class GradientModel(nn.Module):
    """Parameters with ResNet-50's shapes and a forward of negligible cost
    whose backward yields every parameter's gradient, last to first."""

    def __init__(self, shapes, seed):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        # Parameter names may not contain dots; the index keeps the order.
        self.names = [name for name, _ in shapes]
        self.weights = nn.ParameterList(
            nn.Parameter(torch.randn(shape, generator=gen) * 0.01) for _, shape in shapes)

    def forward(self, x):
        total = x.new_zeros(())
        # Each term's autograd node is created after the previous one's, so
        # backward runs them (and fills the gradients) in reverse order.
        for p in self.weights:
            total = total + _Emit.apply(p, x)
        return total


def step(model, opt, x, set_to_none):
    opt.zero_grad(set_to_none=set_to_none)
    model(x).backward()
    opt.step()


def keep_freed_memory():
    """Asks glibc to serve large allocations from the heap and never to trim
    it, so memory freed by one step is reused by the next without page
    faults (what the MALLOC_MMAP_THRESHOLD_/MALLOC_TRIM_THRESHOLD_ variables
    do, set from inside the process)."""
    libc = ctypes.CDLL(None)
    m_trim_threshold, m_mmap_threshold = -1, -3
    # 32 MiB is the largest mmap threshold glibc accepts on 64-bit machines
    # (every ResNet-50 tensor is smaller); the trim threshold is a C int.
    ok = libc.mallopt(m_mmap_threshold, 32 << 20) and libc.mallopt(m_trim_threshold, 2**31 - 1)
    if not ok:
        raise OSError("mallopt refused the thresholds")


# ---------------------------------------------------------------- timing

def timed_steps(model, opt, x, warmup, steps, barrier, set_to_none):
    """Per-step times (s) of this rank after `warmup` untimed steps."""
    for _ in range(warmup):
        step(model, opt, x, set_to_none)
    barrier()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step(model, opt, x, set_to_none)
        times.append(time.perf_counter() - t0)
    barrier()
    return times


def slowest_rank(times, name):
    """Each step's time on the slowest rank."""
    t = torch.tensor(times, dtype=torch.float64)
    return hvd.allreduce(t, op=hvd.Max, name=name).tolist()


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def summary(times_s):
    ms = [t * 1e3 for t in times_s]
    return statistics.median(ms), statistics.fmean(ms), min(ms), len(ms)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="timed steps per path and round")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps before each round")
    parser.add_argument("--rounds", type=int, default=2,
                        help="times each path runs (the order alternates per round)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--threads", type=int, default=0,
                        help="torch threads per rank (0: the node's CPUs divided by its ranks, "
                             "so ranks do not oversubscribe the cores)")
    parser.add_argument("--zero_grad", choices=("none", "zeros", "both"), default="both",
                        help="how steps clear gradients: none = zero_grad(set_to_none=True), "
                             "zeros = zero_grad(set_to_none=False), both = each in turn")
    parser.add_argument("--keep_freed_memory", action=argparse.BooleanOptionalAction,
                        default=True,
                        help="keep freed memory in the process (glibc mallopt), so fresh "
                             "gradients do not page-fault every step")
    args = parser.parse_args()
    if args.keep_freed_memory:
        keep_freed_memory()
    if args.steps < 1 or args.warmup < 0 or args.rounds < 1:
        parser.error("--steps and --rounds must be positive, --warmup not negative")

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    torch.set_num_threads(args.threads or
                          max(1, (os.cpu_count() or 1) // max(1, hvd.local_size())))

    # torch.distributed for DDP, on the same ranks as kolo.
    port = hvd.broadcast_object(free_port() if rank == 0 else None, root_rank=0,
                                name="master_port")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=size)

    shapes = resnet50_shapes()
    numel = sum(torch.Size(s).numel() for _, s in shapes)

    # Three models with the same initial parameters (one seed): the exchange
    # hooks of kolo's optimizer and of DDP each attach to their own model's
    # parameters; the third has none.
    kolo_model = GradientModel(shapes, args.seed)
    ddp_module = GradientModel(shapes, args.seed)
    local_model = GradientModel(shapes, args.seed)
    named = [(name, p) for name, p in zip(kolo_model.names, kolo_model.weights)]
    kolo_opt = hvd.DistributedOptimizer(torch.optim.SGD(kolo_model.parameters(), lr=0.0),
                                        named_parameters=named)
    ddp_model = nn.parallel.DistributedDataParallel(ddp_module)
    ddp_opt = torch.optim.SGD(ddp_model.parameters(), lr=0.0)
    local_opt = torch.optim.SGD(local_model.parameters(), lr=0.0)

    # A different scalar input per rank, so the average differs from every
    # rank's own gradient.
    x = torch.tensor(float(rank + 1))

    # Equal results: one step of each from the same parameters and inputs.
    kolo_opt.zero_grad(set_to_none=True)
    kolo_model(x).backward()
    kolo_opt.synchronize()
    kolo_grads = [p.grad.clone() for p in kolo_model.weights]
    with kolo_opt.skip_synchronize():
        kolo_opt.step()
    ddp_opt.zero_grad(set_to_none=True)
    ddp_model(x).backward()
    ddp_grads = [p.grad.clone() for p in ddp_module.weights]
    ddp_opt.step()
    mean_x = (size + 1) / 2.0  # the average of 1..size
    equal = all(torch.allclose(a, b) for a, b in zip(kolo_grads, ddp_grads))
    expected = all(torch.allclose(a, p.detach() * mean_x)
                   for a, p in zip(kolo_grads, kolo_model.weights))
    max_diff = max(float((a - b).abs().max()) for a, b in zip(kolo_grads, ddp_grads))
    flags = hvd.allreduce(torch.tensor([float(equal), float(expected)]), op=hvd.Min,
                          name="equal_results")
    equal, expected = bool(flags[0]), bool(flags[1])
    del kolo_grads, ddp_grads

    paths = {
        "kolo": (kolo_model, kolo_opt),
        "ddp": (ddp_model, ddp_opt),
    }
    modes = ("none", "zeros") if args.zero_grad == "both" else (args.zero_grad,)
    times = {}
    for mode in modes:
        set_to_none = mode == "none"
        per = times[mode] = {"kolo": [], "ddp": [], "local": []}
        for r in range(args.rounds):
            order = ("kolo", "ddp") if r % 2 == 0 else ("ddp", "kolo")
            for key in order:
                model, opt = paths[key]
                t = timed_steps(model, opt, x, args.warmup, args.steps, dist.barrier,
                                set_to_none)
                per[key] += slowest_rank(t, f"times.{mode}.{key}.{r}")
        t = timed_steps(local_model, local_opt, x, args.warmup, args.steps, hvd.barrier,
                        set_to_none)
        per["local"] += slowest_rank(t, f"times.{mode}.local")

    if rank == 0:
        print(f"torch_ddp_compare: ResNet-50 gradients per step: {len(shapes)} float32 tensors, "
              f"{numel:,} values ({numel * 4 / 1e6:.1f} MB), averaged over {size} ranks")
        print(f"  torch {torch.__version__}, {os.cpu_count()} CPUs, "
              f"{torch.get_num_threads()} torch threads per rank, {args.rounds} rounds x "
              f"{args.steps} timed steps ({args.warmup} warmup) per path; a step's time is "
              "the slowest rank's; freed memory kept in the process: "
              f"{'yes' if args.keep_freed_memory else 'no'}")
        print(f"  equal results (kolo vs DDP averaged gradients after one step, "
              f"torch.allclose): {equal} (max |diff| {max_diff:.3g}); "
              f"equal to the expected average: {expected}")
        for mode in modes:
            per = times[mode]
            kolo, ddp, local = summary(per["kolo"]), summary(per["ddp"]), summary(per["local"])
            ratio = ddp[0] / kolo[0]
            kolo_x, ddp_x = kolo[0] - local[0], ddp[0] - local[0]
            exchange = ddp_x / kolo_x if kolo_x > 0 else float("inf")
            how = ("zero_grad(set_to_none=True), PyTorch's default" if mode == "none"
                   else "zero_grad(set_to_none=False)")
            print(f"  steps with {how}:")
            print(f"    {'path':<40} {'median ms':>10} {'mean ms':>10} {'min ms':>10} "
                  f"{'steps':>6}")
            rows = (("kolo.torch DistributedOptimizer", kolo),
                    ("DDP + gloo (default buckets)", ddp),
                    ("compute only (no exchange)", local))
            for label, (med, mean, low, n) in rows:
                print(f"    {label:<40} {med:>10.1f} {mean:>10.1f} {low:>10.1f} {n:>6}")
            print(f"    ratio DDP+gloo / kolo: step median {ratio:.2f} (mean "
                  f"{ddp[1] / kolo[1]:.2f}); exchange beyond compute: kolo {kolo_x:.1f} ms, "
                  f"DDP+gloo {ddp_x:.1f} ms, ratio {exchange:.2f}")
            print(f"RESULT zero_grad={mode} kolo_ms={kolo[0]:.2f} ddp_gloo_ms={ddp[0]:.2f} "
                  f"ratio={ratio:.3f} exchange_ratio={exchange:.3f} "
                  f"equal_gradients={int(equal)}", flush=True)

    dist.barrier()
    dist.destroy_process_group()
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
