"""A rank started by torchrun, not kolorun: kolo.torch reads torchrun's
RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE, trains a Linear model a few
steps with DistributedOptimizer, and checks through allgather that every
rank ends with the same weights. Prints "torchrun rank R/N ok" or exits
non-zero saying what differed."""

import os
import sys

import torch

import kolo.torch as hvd

hvd.init()
rank, size = hvd.rank(), hvd.size()
expect = {"rank": ("RANK", rank), "size": ("WORLD_SIZE", size),
          "local_rank": ("LOCAL_RANK", hvd.local_rank()),
          "local_size": ("LOCAL_WORLD_SIZE", hvd.local_size())}
for what, (var, got) in expect.items():
    if int(os.environ[var]) != got:
        sys.exit(f"{what} {got} != {var}={os.environ[var]}")

torch.manual_seed(100 + rank)  # different starting weights on every rank
model = torch.nn.Linear(8, 2)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                               named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
for step in range(5):
    g = torch.Generator().manual_seed(1000 * rank + step)  # each rank its own batch
    x = torch.randn(16, 8, generator=g)
    y = torch.randn(16, 2, generator=g)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()

flat = torch.cat([p.detach().reshape(1, -1) for p in model.parameters()], dim=1)
every = hvd.allgather(flat, name="torchrun.weights")
if every.shape[0] != size:
    sys.exit(f"allgather gave {every.shape[0]} rows for {size} ranks")
for r in range(size):
    if not torch.equal(every[r], flat[0]):
        sys.exit(f"rank {rank}: weights differ from rank {r}'s")
print(f"torchrun rank {rank}/{size} ok", flush=True)
hvd.shutdown()
