# The Keras data-parallel training program that kolo.tensorflow replaces
# Horovod under: the same model, optimizer and calls, run as
#
#   kolorun -np 2 -- python examples/keras_mnist.py
#
# Changes from the original program, each marked "KOLO:" below:
#   - the import (kolo.tensorflow instead of horovod.tensorflow);
#   - Fashion-MNIST from the local Debian dataset instead of downloading MNIST;
#   - the calls that do not exist in TensorFlow/Keras 3 are fixed;
#   - --epochs/--samples flags (defaults: the original's 10 epochs, all data)
#     so tests can run it on a subset, and a final report per rank.
import argparse
import hashlib

import numpy as np
import tensorflow as tf
import kolo.tensorflow as hvd  # KOLO: was `import horovod.tensorflow as hvd`

import fashion_mnist_idx  # KOLO: Debian's Fashion-MNIST, beside this script

# KOLO: flags for a shorter run; the defaults are the original program's.
parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=10)
parser.add_argument("--samples", type=int, default=0, help="train on the first N images (0: all)")
parser.add_argument("--data-dir", default=fashion_mnist_idx.DEFAULT_DIR)
args = parser.parse_args()

# Initialize: attach this process to kolod as one rank.
hvd.init()

# Same random seed on every rank, so training is reproducible.
tf.random.set_seed(42)

# Make only this process's GPU visible.
# KOLO: the original looped set_visible_devices over every GPU (each call
# replacing the previous) and then called tf.config.experimental.get_local_device,
# which does not exist; the intent, one GPU per rank chosen by local rank, is:
gpus = tf.config.experimental.list_physical_devices('GPU')
if gpus:
    tf.config.experimental.set_visible_devices(gpus[hvd.local_rank() % len(gpus)], 'GPU')

# Number of ranks and this process's rank.
size = hvd.size()
rank = hvd.rank()


# KOLO: Fashion-MNIST from Debian's dataset-fashion-mnist (idx files, gzip)
# instead of tf.keras.datasets.mnist.load_data(), which downloads.
def load_idx(name):
    return fashion_mnist_idx.load_idx(args.data_dir, name)


train_images = load_idx("train-images-idx3-ubyte.gz")
train_labels = load_idx("train-labels-idx1-ubyte.gz")
if args.samples:
    train_images, train_labels = train_images[:args.samples], train_labels[:args.samples]

# Load the data
dataset = tf.data.Dataset.from_tensor_slices((train_images, train_labels)).shuffle(10000).batch(128)

# Build the model
model = tf.keras.Sequential([
    tf.keras.layers.Flatten(),
    tf.keras.layers.Dense(128, activation='relu'),
    tf.keras.layers.Dense(10)
])

# Loss
loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

# Optimizer, its learning rate scaled by the number of ranks
optimizer = tf.keras.optimizers.Adam(0.001 * size)

# Distributed optimizer: gradients are averaged over the ranks
optimizer = hvd.DistributedOptimizer(optimizer)

# Distributed model
model = hvd.DistributedModel(model)

# Compile
model.compile(optimizer=optimizer,
              loss=loss_fn,
              metrics=['accuracy'])

# Train
# KOLO: only rank 0 prints the progress bar (both ranks print the same
# numbers; verbose=1 on both interleaves two bars).
history = model.fit(dataset, epochs=args.epochs, verbose=1 if rank == 0 else 2)

# Synchronize the model globally
hvd.broadcast_variables(model.variables, root_rank=0)
# KOLO: in Keras 3 `optimizer.variables` is a list, not a method.
hvd.broadcast_variables(optimizer.variables, root_rank=0)

# KOLO: the report: a checksum of the weights (equal on every rank) and the
# accuracy, on the training data and on the test set.
digest = hashlib.sha256()
for v in model.variables:
    digest.update(np.ascontiguousarray(v.numpy()).tobytes())
test_images = load_idx("t10k-images-idx3-ubyte.gz")
test_labels = load_idx("t10k-labels-idx1-ubyte.gz")
_, test_acc = model.evaluate(test_images, test_labels, batch_size=1024, verbose=0)
print(f"rank {rank}/{size}: weights sha256 {digest.hexdigest()[:16]} "
      f"train accuracy {history.history['accuracy'][-1]:.4f} test accuracy {test_acc:.4f}",
      flush=True)
