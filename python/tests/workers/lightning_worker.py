"""Checks of kolo.lightning.KoloStrategy run on every rank: a small MLP
trained by Lightning's Trainer with full-batch gradient descent (each rank
one equal share of the data per step) must end with the same weights on
every rank, equal to one process's training on the whole batch; then the
strategy's collectives, ranks, sampler and checkpointing."""

import os
import time
import warnings

import torch
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import lightning.pytorch as pl
from lightning.pytorch.plugins import TorchCheckpointIO
from lightning.pytorch.utilities.rank_zero import rank_zero_only

import kolo.torch as hvd
from kolo.lightning import KoloStrategy
from harness import check, run

warnings.filterwarnings("ignore")  # Lightning's advice on workers and logging

OUT = os.environ["KOLO_TEST_OUT"]
SAMPLES, EPOCHS, LR, MOMENTUM = 64, 12, 0.2, 0.5
# Weights after training: float32 sums over halves instead of the whole
# batch differ in the last bits only.
TOL = 1e-5


def expect(cond, msg):
    if not cond:
        raise AssertionError(msg)


def make_net():
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def data():
    g = torch.Generator().manual_seed(7)
    x = torch.randn(SAMPLES, 4, generator=g)
    y = (x[:, :1] * 0.5 - x[:, 1:2] ** 2 + 0.1 * torch.randn(SAMPLES, 1, generator=g))
    return x, y


class MLP(pl.LightningModule):
    def __init__(self, seed):
        super().__init__()
        torch.manual_seed(seed)
        self.net = make_net()
        self.seen = []

    def training_step(self, batch, batch_idx):
        x, y, idx = batch
        self.seen.extend(idx.tolist())
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss, sync_dist=True, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y, _ = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=LR, momentum=MOMENTUM)

    def train_dataloader(self):
        x, y = data()
        return DataLoader(TensorDataset(x, y, torch.arange(SAMPLES)), batch_size=SAMPLES // N,
                          shuffle=True)

    def val_dataloader(self):
        x, y = data()
        return DataLoader(TensorDataset(x, y, torch.arange(SAMPLES)), batch_size=SAMPLES // N)


class RecordingIO(TorchCheckpointIO):
    """Lightning's checkpoint IO, counting the files this rank writes."""

    def __init__(self):
        super().__init__()
        self.saved = []

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        self.saved.append(str(path))
        super().save_checkpoint(checkpoint, path, storage_options)


def flat(module):
    return torch.cat([p.detach().reshape(-1) for p in module.parameters()])


def reference():
    """One process, the whole batch each step, from rank 0's initial weights:
    (the network, each step's loss)."""
    torch.manual_seed(100)
    net = make_net()
    opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM)
    x, y = data()
    losses = []
    for _ in range(EPOCHS):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(net(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return net, losses


hvd.init()
R, N = hvd.rank(), hvd.size()
CKPT_DIR = os.path.join(OUT, "checkpoints")
IO = RecordingIO()
STRATEGY = KoloStrategy(checkpoint_io=IO)
# Each rank starts from other weights: the strategy must start all from rank 0's.
MODEL = MLP(seed=100 + R)
TRAINER = pl.Trainer(strategy=STRATEGY, accelerator="cpu", devices=1, max_epochs=EPOCHS,
                     enable_progress_bar=False, logger=False, enable_model_summary=False,
                     num_sanity_val_steps=0, check_val_every_n_epoch=EPOCHS,
                     callbacks=[pl.callbacks.ModelCheckpoint(dirpath=CKPT_DIR,
                                                             filename="last")])


@check
def fit_runs():
    TRAINER.fit(MODEL)
    expect(TRAINER.state.finished, f"trainer state {TRAINER.state}")


@check
def weights_identical_on_every_rank():
    rows = hvd.allgather(flat(MODEL).unsqueeze(0))
    for r in range(N):
        expect(torch.equal(rows[r], rows[0]), f"rank {r}'s weights differ from rank 0's: "
               f"max |diff| {(rows[r] - rows[0]).abs().max().item()}")


@check
def matches_single_process_training():
    ref, _ = reference()
    diff = (flat(MODEL) - flat(ref)).abs().max().item()
    expect(diff < TOL, f"weights differ from one process's by {diff} (tolerance {TOL})")
    x, y = data()
    with torch.no_grad():
        loss = torch.nn.functional.mse_loss(MODEL.net(x), y).item()
        ref_loss = torch.nn.functional.mse_loss(ref(x), y).item()
        start = torch.nn.functional.mse_loss(MLP(seed=100).net(x), y).item()
    expect(abs(loss - ref_loss) <= TOL * max(1.0, ref_loss),
           f"loss {loss} != single-process loss {ref_loss}")
    expect(loss < start, f"training did not lower the loss ({start} -> {loss})")


@check
def logged_loss_is_the_mean_over_ranks():
    logged = TRAINER.callback_metrics["train_loss"]
    # The last epoch's loss (before its step): the mean over the ranks of
    # their equal shares' losses (sync_dist, through reduce) is the whole
    # batch's loss.
    want = reference()[1][-1]
    expect(logged.shape == (), f"shape {logged.shape}")
    expect(abs(logged.item() - want) <= TOL * max(1.0, want), f"train_loss {logged} != {want}")
    gathered = hvd.allgather(logged.reshape(1))
    expect(torch.equal(gathered, logged.expand(N)), f"ranks logged {gathered.tolist()}")


@check
def distributed_sampler_splits_the_data():
    sampler = TRAINER.train_dataloader.sampler
    expect(isinstance(sampler, DistributedSampler), f"sampler {type(sampler).__name__}")
    expect(sampler.num_replicas == N and sampler.rank == R,
           f"num_replicas {sampler.num_replicas}, rank {sampler.rank}")
    expect(STRATEGY.distributed_sampler_kwargs == {"num_replicas": N, "rank": R},
           f"{STRATEGY.distributed_sampler_kwargs}")
    per_epoch = hvd.allgather_object(sorted(MODEL.seen[-(SAMPLES // N):]))
    union = sorted(i for part in per_epoch for i in part)
    expect(union == list(range(SAMPLES)), f"the last epoch's samples over the ranks: {per_epoch}")


@check
def ranks():
    expect(STRATEGY.world_size == N and TRAINER.world_size == N, f"world_size {STRATEGY.world_size}")
    expect(STRATEGY.global_rank == R and TRAINER.global_rank == R, f"rank {STRATEGY.global_rank}")
    expect(STRATEGY.local_rank == hvd.local_rank(), f"local_rank {STRATEGY.local_rank}")
    expect(STRATEGY.node_rank == 0, f"node_rank {STRATEGY.node_rank}")
    expect(STRATEGY.is_global_zero == (R == 0), f"is_global_zero {STRATEGY.is_global_zero}")
    expect(STRATEGY.root_device == torch.device("cpu"), f"root_device {STRATEGY.root_device}")
    expect(rank_zero_only.rank == R, f"rank_zero_only.rank {rank_zero_only.rank}")

    @rank_zero_only
    def only_zero():
        return "zero"

    expect(only_zero() == ("zero" if R == 0 else None), "rank_zero_only ran on the wrong ranks")


@check
def reduce():
    t = torch.tensor([R + 1.0, 2.0 * R])
    mean = STRATEGY.reduce(t)
    expect(torch.allclose(mean, torch.tensor([(N + 1) / 2, N - 1.0])), f"mean {mean}")
    total = STRATEGY.reduce(t, reduce_op="sum")
    expect(torch.allclose(total, torch.tensor([N * (N + 1) / 2, N * (N - 1.0)])), f"sum {total}")
    expect(torch.equal(t, torch.tensor([R + 1.0, 2.0 * R])), "reduce changed its input")
    as_int = STRATEGY.reduce(torch.tensor(R), reduce_op="mean")
    expect(as_int.is_floating_point() and abs(as_int.item() - (N - 1) / 2) < 1e-6,
           f"mean of ints {as_int}")
    top = STRATEGY.reduce(torch.tensor(float(R)), reduce_op="max")
    expect(top.item() == N - 1, f"max {top}")
    if torch.distributed.is_available():
        via_torch = STRATEGY.reduce(torch.tensor(1.0), reduce_op=torch.distributed.ReduceOp.SUM)
        expect(via_torch.item() == N, f"ReduceOp.SUM {via_torch}")
    expect(STRATEGY.reduce("not a tensor") == "not a tensor", "a non-tensor changed")
    expect(STRATEGY.reduce_boolean_decision(R == 0) == (N == 1), "reduce_boolean_decision(all)")
    expect(STRATEGY.reduce_boolean_decision(R == 0, all=False), "reduce_boolean_decision(any)")
    try:
        STRATEGY.reduce(t, reduce_op="median")
    except ValueError as e:
        expect("median" in str(e), str(e))
    else:
        raise AssertionError("reduce_op='median' was accepted")


@check
def broadcast():
    got = STRATEGY.broadcast({"from": R, "tensor": torch.full((2,), float(R))})
    expect(got["from"] == 0 and torch.equal(got["tensor"], torch.zeros(2)), f"src=0: {got}")
    last = STRATEGY.broadcast(f"rank{R}", src=N - 1)
    expect(last == f"rank{N - 1}", f"src={N - 1}: {last}")


@check
def barrier():
    marker = os.path.join(OUT, "barrier.last")
    if R == N - 1:
        time.sleep(0.5)
        with open(marker, "w") as f:
            f.write("here")
    STRATEGY.barrier("kolo-test")
    expect(os.path.exists(marker), "passed the barrier before the last rank reached it")


@check
def all_gather():
    rows = STRATEGY.all_gather(torch.tensor([R, 2.0 * R]))
    expect(rows.shape == (N, 2), f"shape {tuple(rows.shape)}")
    expect(torch.equal(rows, torch.tensor([[r, 2.0 * r] for r in range(N)])), f"{rows}")
    scalars = STRATEGY.all_gather(torch.tensor(float(R)))
    expect(torch.equal(scalars, torch.arange(N, dtype=torch.float32)), f"scalars {scalars}")
    expect(not rows.requires_grad, "without sync_grads the result has a gradient")
    via_module = MODEL.all_gather({"r": torch.tensor([R])})
    expect(torch.equal(via_module["r"], torch.arange(N).reshape(N, 1)), f"{via_module}")


@check
def all_gather_sync_grads():
    x = torch.tensor([1.0 + R, 2.0], requires_grad=True)
    rows = STRATEGY.all_gather(x, sync_grads=True)
    expect(rows.requires_grad, "sync_grads: no gradient")
    # Rank q's loss weighs row i by (q + 1) * (i + 1): rank r's input gets the
    # sum over q of (q + 1) * (r + 1), as torch.distributed's all_gather gives.
    weights = (R + 1.0) * torch.arange(1.0, N + 1).reshape(N, 1)
    (rows * weights).sum().backward()
    want = (R + 1.0) * N * (N + 1) / 2
    expect(torch.allclose(x.grad, torch.full((2,), want)), f"grad {x.grad.tolist()} != {want}")


@check
def checkpoint_written_by_rank_zero_only():
    path = os.path.join(CKPT_DIR, "last.ckpt")
    expect((len(IO.saved) > 0) == (R == 0), f"rank {R} wrote {IO.saved}")
    expect(os.path.exists(path), f"no {path}")
    ckpt = torch.load(path, weights_only=False)
    weights = torch.cat([v.reshape(-1) for v in ckpt["state_dict"].values()])
    expect(torch.equal(weights, flat(MODEL)), "the checkpoint's weights are not the final ones")
    explicit = os.path.join(OUT, "explicit.ckpt")
    before = len(IO.saved)
    TRAINER.save_checkpoint(explicit)
    # Trainer.save_checkpoint waits at the barrier: the file is there for all.
    expect(os.path.exists(explicit), "after save_checkpoint the file is missing")
    expect((len(IO.saved) - before) == (1 if R == 0 else 0), f"rank {R} wrote {IO.saved}")


@check
def validate_after_fit():
    (metrics,) = TRAINER.validate(MODEL, verbose=False)
    x, y = data()
    with torch.no_grad():
        want = torch.nn.functional.mse_loss(MODEL.net(x), y).item()
    expect(abs(metrics["val_loss"] - want) < 1e-5, f"val_loss {metrics['val_loss']} != {want}")


@check
def second_fit_keeps_ranks_in_step():
    # teardown removed the first fit's gradient hooks: a new Trainer on the
    # same module allreduces through its own optimizer only.
    trainer = pl.Trainer(strategy=KoloStrategy(), accelerator="cpu", devices=1, max_epochs=2,
                         enable_progress_bar=False, logger=False, enable_checkpointing=False,
                         enable_model_summary=False, limit_val_batches=0)
    before = flat(MODEL).clone()
    trainer.fit(MODEL)
    rows = hvd.allgather(flat(MODEL).unsqueeze(0))
    expect(all(torch.equal(rows[r], rows[0]) for r in range(N)), "ranks differ after a second fit")
    expect(not torch.equal(before, flat(MODEL)), "the second fit changed nothing")


@check
def strategy_by_name():
    trainer = pl.Trainer(strategy="kolo", accelerator="cpu", devices=1, logger=False,
                         enable_progress_bar=False)
    expect(isinstance(trainer.strategy, KoloStrategy), f"{type(trainer.strategy).__name__}")
    expect(trainer.world_size == N and trainer.global_rank == R, "ranks of strategy='kolo'")


run(hvd.rank)
