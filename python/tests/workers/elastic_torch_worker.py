"""An elastic PyTorch job for the tests: a linear model trained by a
kolo.torch DistributedOptimizer (SGD with momentum) on a fixed regression
problem, the samples dealt by kolo.torch.elastic.ElasticSampler, the state a
TorchState committed every step.

    elastic_torch_worker.py --epochs 3 [--victim R --die-at S] [--step-sleep 0.05]
                            [--final-size N]

Beside the model the state keeps `counts`: how often the committed training
saw each sample this epoch (one-hot rows of each rank's batch, summed over
the ranks with the step's gradients), and `epoch_counts`, one such list per
finished epoch. The process that started as rank R (not a joiner) kills
itself with SIGKILL before global step S; with --final-size the ranks
finish only once the job has N ranks again (the restarted one joined). Each
process that finishes writes $KOLO_TEST_OUT/rank<final rank>.json: its final
weights, counts, rank, size, whether it joined, its resets and the sizes it
trained at.
"""

import argparse
import json
import os
import signal
import sys
import time

import numpy as np
import torch

import kolo.torch as hvd

SAMPLES, DIMS, BATCH = 48, 6, 2


class Rows(torch.utils.data.Dataset):
    def __init__(self):
        rng = np.random.default_rng(11)
        self.x = torch.tensor(rng.standard_normal((SAMPLES, DIMS)), dtype=torch.float32)
        w = torch.tensor(rng.standard_normal((DIMS, 1)), dtype=torch.float32)
        self.y = self.x @ w

    def __len__(self):
        return SAMPLES

    def __getitem__(self, i):
        return i, self.x[i], self.y[i]


def wait_for_joiners(state, final_size, timeout_s=60):
    """Trained out: commits (where joiners waiting are noticed) until the
    job has `final_size` ranks again, so that a rank restarted after a
    death joins before the others finish (a joiner that arrives once the
    job is finishing is not part of it)."""
    deadline = time.monotonic() + timeout_s
    while hvd.size() < final_size and time.monotonic() < deadline:
        time.sleep(0.05)
        state.commit()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--victim", type=int, default=-1)
    p.add_argument("--die-at", type=int, default=-1)
    p.add_argument("--step-sleep", type=float, default=0.0)
    p.add_argument("--final-size", type=int, default=0)
    a = p.parse_args()
    out = os.environ["KOLO_TEST_OUT"]
    joiner = os.environ.get("KOLO_ELASTIC_JOINER") == "1"
    first_rank = int(os.environ.get("KOLO_RANK", "0"))
    doomed = a.die_at >= 0 and not joiner and first_rank == a.victim

    hvd.init()
    torch.manual_seed(100 + first_rank + (50 if joiner else 0))  # differs per process
    data = Rows()
    model = torch.nn.Linear(DIMS, 1)
    initial = [t.detach().clone() for t in model.state_dict().values()]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.5),
                                   named_parameters=model.named_parameters())
    sampler = hvd.elastic.ElasticSampler(data, shuffle=True, seed=3)
    loader = torch.utils.data.DataLoader(data, batch_size=BATCH, sampler=sampler)
    state = hvd.elastic.TorchState(model, opt, train_sampler=sampler, epoch=0, step=0,
                                   counts=[0] * SAMPLES, epoch_counts=[])
    record = {"joiner": joiner, "resets": 0, "sizes": []}

    def on_reset():
        record["resets"] += 1

    state.register_reset_callbacks([on_reset])
    synced_initial = {}

    def loss_of(m):
        with torch.no_grad():
            return float(torch.mean((m(data.x) - data.y) ** 2))

    @hvd.elastic.run
    def train(state):
        if "loss" not in synced_initial:
            synced_initial["loss"] = loss_of(state.model)
        if hvd.size() not in record["sizes"]:
            record["sizes"].append(hvd.size())
        while state.epoch < a.epochs:
            for i, (idx, x, y) in enumerate(loader):
                if doomed and state.step >= a.die_at:
                    os.kill(os.getpid(), signal.SIGKILL)
                opt.zero_grad()
                loss = torch.mean((state.model(x) - y) ** 2)
                loss.backward()
                opt.step()
                seen = torch.zeros(SAMPLES)
                seen[idx] = 1.0
                seen = hvd.allreduce(seen, op=hvd.Sum, name="counts")
                state.counts = [c + int(s) for c, s in zip(state.counts, seen.tolist())]
                state.train_sampler.record_batch(i, BATCH)
                state.step += 1
                state.commit()
                if a.step_sleep:
                    time.sleep(a.step_sleep)
            state.epoch_counts = state.epoch_counts + [state.counts]
            state.counts = [0] * SAMPLES
            state.epoch += 1
            state.train_sampler.set_epoch(state.epoch)
            state.commit()
        wait_for_joiners(state, a.final_size)

    train(state)
    rank = hvd.rank()
    record.update(
        rank=rank, size=hvd.size(), epoch=state.epoch, steps=state.step,
        epoch_counts=state.epoch_counts,
        weights=[t.tolist() for t in model.state_dict().values()],
        momentum=[opt.state[q]["momentum_buffer"].tolist() for q in model.parameters()],
        initial=[t.tolist() for t in initial],
        first_loss=synced_initial["loss"], final_loss=loss_of(model))
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(record, f)
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
