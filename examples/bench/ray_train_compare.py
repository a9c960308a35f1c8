"""ResNet-50's per-step gradient exchange as a Ray Train job, with Kolo's
backend (kolo.ray.KoloConfig, kolo.torch.DistributedOptimizer) and with Ray
Train's own TorchTrainer (torch DDP over gloo), in one run.

    python examples/bench/ray_train_compare.py [--workers 2] [--steps 20] [--warmup 3]
    python examples/bench/ray_train_compare.py --quick     # about a minute

The model and the step are torch_ddp_compare.py's (ResNet-50's 161
parameter tensors, 25.6 M float32 values, next to no compute; a step is
zero_grad, forward, backward, optimizer.step with SGD at learning rate 0),
so a step measures the gradient exchange. The same number of workers (Ray
actors, one CPU each) and steps run under each trainer, one trainer after
the other on the same Ray cluster (--rounds N: N times each, the order
alternating, the steps pooled):
  kolo      ray.train DataParallelTrainer + kolo.ray.KoloConfig; the loop uses
            kolo.torch.DistributedOptimizer (each node's kolod found or
            started by the backend);
  DDP+gloo  ray.train.torch.TorchTrainer (TorchConfig(backend="gloo"), the
            process group Ray Train sets up); the loop wraps the model in
            torch.nn.parallel.DistributedDataParallel with its default buckets.
A step's time is the slowest worker's. Before timing, the kolo loop checks
its averaged gradients against the expected average and the DDP loop does
the same, so both exchange the same values. With --local, the kolo loop also
times the same step with no exchange ("compute only").

Without --address it starts a local Ray cluster on this machine (and stops
it); with --address it joins a running one. It prints each path's per-step
times, a table and one line for scripts:
  RESULT workers=<n> kolo_ms=<median> ddp_gloo_ms=<median> ratio=<ddp/kolo>
    equal_gradients=<0|1>
Nothing about speed is asserted.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def _setup(config):
    """In a worker: torch_ddp_compare's pieces, the threads, glibc's
    thresholds. Returns the module."""
    import ray.train
    import torch
    import torch_ddp_compare as tdc
    if config["keep_freed_memory"]:
        tdc.keep_freed_memory()
    # As torch_ddp_compare.py: the node's CPUs divided by its workers.
    local_size = ray.train.get_context().get_local_world_size()
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, local_size)))
    return tdc


def _expected(tdc, grads, model, size):
    import torch
    mean_x = (size + 1) / 2.0
    return all(torch.allclose(g, p.detach() * mean_x) for g, p in zip(grads, model.weights))


def _write(config, name, record):
    path = os.path.join(config["out"], name)
    with open(path + ".tmp", "w") as f:
        json.dump(record, f)
    os.replace(path + ".tmp", path)


def kolo_loop(config):
    import torch
    import kolo.torch as hvd
    tdc = _setup(config)
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    shapes = tdc.resnet50_shapes()
    model = tdc.GradientModel(shapes, config["seed"])
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0),
                                   named_parameters=list(zip(model.names, model.weights)))
    x = torch.tensor(float(rank + 1))
    opt.zero_grad(set_to_none=True)
    model(x).backward()
    opt.synchronize()
    ok = _expected(tdc, [p.grad for p in model.weights], model, size)
    with opt.skip_synchronize():
        opt.step()
    ok = bool(hvd.allreduce(torch.tensor([float(ok)]), op=hvd.Min, name="ok")[0])
    times = tdc.timed_steps(model, opt, x, config["warmup"], config["steps"], hvd.barrier,
                            config["set_to_none"])
    times = tdc.slowest_rank(times, "times.kolo")
    local = []
    if config["local"]:
        lmodel = tdc.GradientModel(shapes, config["seed"])
        lopt = torch.optim.SGD(lmodel.parameters(), lr=0.0)
        local = tdc.slowest_rank(tdc.timed_steps(lmodel, lopt, x, config["warmup"],
                                                 config["steps"], hvd.barrier,
                                                 config["set_to_none"]), "times.local")
    if rank == 0:
        _write(config, config["name"], {"times": times, "local": local, "ok": ok, "size": size,
                                     "threads": torch.get_num_threads(),
                                     "job": os.environ.get("KOLO_JOB_ID")})
    hvd.shutdown()


def ddp_loop(config):
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    tdc = _setup(config)
    rank, size = dist.get_rank(), dist.get_world_size()
    shapes = tdc.resnet50_shapes()
    module = tdc.GradientModel(shapes, config["seed"])
    model = nn.parallel.DistributedDataParallel(module)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    x = torch.tensor(float(rank + 1))
    opt.zero_grad(set_to_none=True)
    model(x).backward()
    ok = torch.tensor([float(_expected(tdc, [p.grad for p in module.weights], module, size))])
    opt.step()
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    times = tdc.timed_steps(model, opt, x, config["warmup"], config["steps"], dist.barrier,
                            config["set_to_none"])
    t = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    if rank == 0:
        _write(config, config["name"], {"times": t.tolist(), "ok": bool(ok[0]), "size": size,
                                    "threads": torch.get_num_threads(), "backend":
                                    dist.get_backend()})


def _ms(times):
    return [t * 1e3 for t in times]


def _row(label, times):
    ms = _ms(times)
    return (f"  {label:<44} {statistics.median(ms):>10.1f} {statistics.fmean(ms):>10.1f} "
            f"{min(ms):>10.1f} {len(ms):>6}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--steps", type=int, default=20, help="timed steps per path")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps before timing")
    p.add_argument("--rounds", type=int, default=1,
                   help="times each trainer runs (the order alternates per round; each "
                        "round starts both trainers afresh, about 30 s each here)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--zero_grad", choices=("none", "zeros"), default="none",
                   help="none = zero_grad(set_to_none=True) (PyTorch's default), "
                        "zeros = zero_grad(set_to_none=False)")
    p.add_argument("--keep_freed_memory", action=argparse.BooleanOptionalAction, default=True,
                   help="glibc keeps freed memory in each worker (as torch_ddp_compare.py)")
    p.add_argument("--local", action="store_true", help="also time the step with no exchange")
    p.add_argument("--quick", action="store_true", help="5 timed steps, 2 warmup")
    p.add_argument("--address", default=None, help="a running Ray cluster (default: start one)")
    p.add_argument("--cpus", type=int, default=0,
                   help="CPUs of the local Ray cluster (default: max(--workers, this machine's))")
    a = p.parse_args()
    if a.quick:
        a.steps, a.warmup = 5, 2
    if a.workers < 1 or a.steps < 1 or a.warmup < 0 or a.rounds < 1:
        p.error("--workers, --steps and --rounds must be positive, --warmup not negative")

    # The workers import torch_ddp_compare and kolo from this checkout.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [HERE, os.path.join(REPO, "python")] +
        [x for x in os.environ.get("PYTHONPATH", "").split(os.pathsep) if x])
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.path[:0] = [HERE, os.path.join(REPO, "python")]

    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer
    from kolo.ray import KoloConfig

    ray.init(address=a.address, log_to_driver=False,
             **({} if a.address else {"num_cpus": a.cpus or max(a.workers, os.cpu_count() or 1)}))
    out = tempfile.mkdtemp(prefix="kolo_ray_train_compare.")
    config = {"out": out, "steps": a.steps, "warmup": a.warmup, "seed": a.seed,
              "set_to_none": a.zero_grad == "none", "keep_freed_memory": a.keep_freed_memory,
              "local": a.local}
    scaling = ScalingConfig(num_workers=a.workers, resources_per_worker={"CPU": 1})
    took = {"kolo": 0.0, "ddp": 0.0}
    kolo = {"times": [], "local": [], "ok": True}
    ddp = {"times": [], "ok": True}

    def fit(key, r):
        cfg = dict(config, name=f"{key}.{r}.json")
        t0 = time.monotonic()
        if key == "kolo":
            DataParallelTrainer(kolo_loop, train_loop_config=cfg,
                                backend_config=KoloConfig(timeout_s=60), scaling_config=scaling,
                                run_config=RunConfig(name=f"kolo{r}", storage_path=out)).fit()
        else:
            TorchTrainer(ddp_loop, train_loop_config=cfg,
                         torch_config=TorchConfig(backend="gloo"), scaling_config=scaling,
                         run_config=RunConfig(name=f"ddp{r}", storage_path=out)).fit()
        took[key] += time.monotonic() - t0
        with open(os.path.join(out, cfg["name"])) as f:
            got = json.load(f)
        into = kolo if key == "kolo" else ddp
        for k in ("times", "local"):
            if k in got:
                into[k] = into[k] + got[k]
        into["ok"] = into["ok"] and got["ok"]
        for k in ("threads", "backend"):
            if k in got:
                into[k] = got[k]

    try:
        # Alternating order per round, as torch_ddp_compare.py does.
        for r in range(a.rounds):
            for key in (("kolo", "ddp") if r % 2 == 0 else ("ddp", "kolo")):
                fit(key, r)
    finally:
        ray.shutdown()

    shapes = __import__("torch_ddp_compare").resnet50_shapes()
    numel = sum(__import__("math").prod(s) for _, s in shapes)
    print(f"ray_train_compare: ResNet-50 gradients per step: {len(shapes)} float32 tensors, "
          f"{numel:,} values ({numel * 4 / 1e6:.1f} MB), averaged over {a.workers} Ray Train "
          f"workers; {os.cpu_count()} CPUs here, {kolo['threads']} torch threads per worker; "
          f"{a.rounds} round(s) x {a.steps} timed steps ({a.warmup} warmup) per path; a step's "
          "time is the slowest "
          f"worker's; zero_grad(set_to_none={a.zero_grad == 'none'})")
    print(f"  averaged gradients equal to the expected average: kolo {kolo['ok']}, "
          f"DDP+gloo {ddp['ok']}; trainer wall time (start to end): kolo {took['kolo']:.1f} s, "
          f"DDP+gloo {took['ddp']:.1f} s")
    print("  per-step ms, kolo:     " + " ".join(f"{t:.1f}" for t in _ms(kolo["times"])))
    print("  per-step ms, DDP+gloo: " + " ".join(f"{t:.1f}" for t in _ms(ddp["times"])))
    print(f"  {'path':<44} {'median ms':>10} {'mean ms':>10} {'min ms':>10} {'steps':>6}")
    print(_row("Ray Train + KoloConfig (kolo.torch)", kolo["times"]))
    print(_row(f"Ray TorchTrainer, DDP + {ddp['backend']} (default buckets)", ddp["times"]))
    if kolo["local"]:
        print(_row("compute only (no exchange)", kolo["local"]))
    k, d = statistics.median(kolo["times"]), statistics.median(ddp["times"])
    beyond = ""
    if kolo["local"]:
        c = statistics.median(kolo["local"])
        kx, dx = (k - c) * 1e3, (d - c) * 1e3
        beyond = (f"; exchange beyond compute: kolo {kx:.1f} ms, DDP+gloo {dx:.1f} ms, ratio "
                  f"{dx / kx:.2f}" if kx > 0 else "")
    print(f"  ratio DDP+gloo / kolo: step median {d / k:.2f} (mean "
          f"{statistics.fmean(ddp['times']) / statistics.fmean(kolo['times']):.2f}){beyond}")
    print(f"RESULT workers={a.workers} kolo_ms={k * 1e3:.2f} ddp_gloo_ms={d * 1e3:.2f} "
          f"ratio={d / k:.3f} equal_gradients={int(kolo['ok'] and ddp['ok'])}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
