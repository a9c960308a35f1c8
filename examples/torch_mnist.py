# A PyTorch data-parallel training program written against the horovod.torch
# API and run on Kolo through kolo.torch, the PyTorch counterpart of
# examples/keras_mnist.py:
#
#   kolorun -np 2 -- python examples/torch_mnist.py
#
# Each rank trains the same small classifier on its own shard of Fashion-MNIST
# (Debian's dataset-fashion-mnist, read from local files), DistributedOptimizer
# averages the gradients over the ranks after every batch, and at the end each
# rank prints one report line:
#
#   rank R/N: weights sha256 HEX train accuracy X test accuracy Y
#
# HEX is a checksum of the final weights, so equal values on every rank show
# that the ranks stayed in step. --epochs/--samples shorten the run for tests.
import argparse
import hashlib
import os

import numpy as np
import torch
import torch.nn as nn
import kolo.torch as hvd  # the only line a horovod.torch program changes

import fashion_mnist_idx  # Debian's Fashion-MNIST, beside this script

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=10)
parser.add_argument("--samples", type=int, default=0, help="train on the first N images (0: all)")
parser.add_argument("--batch-size", type=int, default=128, help="images per batch on each rank")
parser.add_argument("--data-dir", default=fashion_mnist_idx.DEFAULT_DIR)
args = parser.parse_args()

# Initialize: attach this process to kolod as one rank.
hvd.init()
size = hvd.size()
rank = hvd.rank()

# A small model trains fastest on one thread per rank when ranks share a node.
torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, hvd.local_size())))


# Fashion-MNIST in the idx format (gzip), as Debian installs it.
def load_idx(name):
    return fashion_mnist_idx.load_idx(args.data_dir, name)


def as_tensors(images, labels):
    x = torch.from_numpy(images.astype(np.float32) / 255.0)
    y = torch.from_numpy(labels.astype(np.int64))
    return x, y


train_x, train_y = as_tensors(load_idx("train-images-idx3-ubyte.gz"),
                              load_idx("train-labels-idx1-ubyte.gz"))
if args.samples:
    train_x, train_y = train_x[:args.samples], train_y[:args.samples]

# Every rank takes the same number of images per epoch (the remainder of an
# uneven split is left out), so all ranks run the same number of steps and
# every allreduce has a partner.
per_rank = len(train_x) // size
if per_rank == 0:
    raise SystemExit(f"{len(train_x)} training images cannot be split over {size} ranks")

# A different seed on each rank: the model starts from different weights on
# every rank until broadcast_parameters below gives every rank rank 0's.
torch.manual_seed(1234 + rank)

model = nn.Sequential(
    nn.Flatten(),
    nn.Linear(28 * 28, 128),
    nn.ReLU(),
    nn.Linear(128, 10),
)
loss_fn = nn.CrossEntropyLoss()

# Learning rate scaled by the number of ranks (the batch over all ranks is
# size times larger).
optimizer = torch.optim.Adam(model.parameters(), lr=0.001 * size)

# Gradients averaged over the ranks before each update.
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

# Start every rank from rank 0's weights and optimizer state.
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)


def global_fraction(correct, total, name):
    """correct/total summed over the ranks."""
    counts = torch.tensor([float(correct), float(total)], dtype=torch.float64)
    counts = hvd.allreduce(counts, op=hvd.Sum, name=name)
    return float(counts[0] / counts[1])


train_acc = 0.0
for epoch in range(args.epochs):
    # One shuffle per epoch, the same on every rank (same generator seed);
    # rank r trains on the r-th block of it.
    order = torch.randperm(len(train_x), generator=torch.Generator().manual_seed(42 + epoch))
    shard = order[rank * per_rank:(rank + 1) * per_rank]
    model.train()
    correct = seen = 0
    loss_sum = 0.0
    for start in range(0, per_rank, args.batch_size):
        idx = shard[start:start + args.batch_size]
        x, y = train_x[idx], train_y[idx]
        optimizer.zero_grad()
        logits = model(x)
        loss = loss_fn(logits, y)
        loss.backward()
        optimizer.step()
        loss_sum += float(loss.detach()) * len(idx)
        correct += int((logits.argmax(1) == y).sum())
        seen += len(idx)
    train_acc = global_fraction(correct, seen, f"train_accuracy.{epoch}")
    if rank == 0:
        print(f"epoch {epoch + 1}/{args.epochs}: rank 0 loss {loss_sum / seen:.4f} "
              f"train accuracy (all ranks) {train_acc:.4f}", flush=True)

# The report: a checksum of the weights (equal on every rank) and the
# accuracy on the training data (last epoch) and on the test set, which each
# rank evaluates one shard of.
digest = hashlib.sha256()
for tensor in model.state_dict().values():
    digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())

test_x, test_y = as_tensors(load_idx("t10k-images-idx3-ubyte.gz"),
                            load_idx("t10k-labels-idx1-ubyte.gz"))
model.eval()
with torch.no_grad():
    mine = slice(rank * len(test_x) // size, (rank + 1) * len(test_x) // size)
    predicted = model(test_x[mine]).argmax(1)
    test_acc = global_fraction(int((predicted == test_y[mine]).sum()), len(predicted),
                               "test_accuracy")

print(f"rank {rank}/{size}: weights sha256 {digest.hexdigest()[:16]} "
      f"train accuracy {train_acc:.4f} test accuracy {test_acc:.4f}",
      flush=True)
