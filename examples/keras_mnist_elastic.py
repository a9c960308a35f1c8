# The Keras data-parallel training program of keras_mnist.py in elastic form:
# ranks may die, be restarted or be added while it trains, and the job goes
# on from the last commit. Run it as
#
#   kolorun -np 2 --min-np 1 -- python examples/keras_mnist_elastic.py
#   kolorun -np 4 --min-np 2 --max-np 4 -- python examples/keras_mnist_elastic.py --epochs 3
#
# What makes it elastic, each marked "ELASTIC:" below:
#   - the model and optimizer live in a KerasState, committed by a callback
#     every --batches-per-commit batches and at each epoch's end;
#   - training is a function decorated with hvd.elastic.run: when the job's
#     membership changes it restores the last commit, resets and runs again;
#   - the data are sharded, and the learning rate scaled, by the ranks the
#     job has now (a reset callback rescales; train() re-shards).
# Data: Fashion-MNIST from the local Debian dataset, as keras_mnist.py reads
# it (no download). --epochs, --samples and --steps-per-epoch shorten a run.
import argparse
import hashlib

import numpy as np
import tensorflow as tf
import kolo.tensorflow.keras as hvd

import fashion_mnist_idx  # Debian's Fashion-MNIST, beside this script

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=10)
parser.add_argument("--samples", type=int, default=0, help="train on the first N images (0: all)")
parser.add_argument("--steps-per-epoch", type=int, default=0,
                    help="batches per epoch on every rank (0: one pass over the data)")
parser.add_argument("--batches-per-commit", type=int, default=10)
parser.add_argument("--batch-size", type=int, default=128)
parser.add_argument("--data-dir", default=fashion_mnist_idx.DEFAULT_DIR)
args = parser.parse_args()

# Initialize: attach this process to kolod as one rank (a rank that joins a
# running job waits here until the others reach a commit).
hvd.init()

tf.random.set_seed(42)

gpus = tf.config.experimental.list_physical_devices('GPU')
if gpus:
    tf.config.experimental.set_visible_devices(gpus[hvd.local_rank() % len(gpus)], 'GPU')


def load_idx(name):
    return fashion_mnist_idx.load_idx(args.data_dir, name)


train_images = load_idx("train-images-idx3-ubyte.gz")
train_labels = load_idx("train-labels-idx1-ubyte.gz")
if args.samples:
    train_images, train_labels = train_images[:args.samples], train_labels[:args.samples]

model = tf.keras.Sequential([
    tf.keras.Input((28, 28)),
    tf.keras.layers.Rescaling(1.0 / 255),
    tf.keras.layers.Flatten(),
    tf.keras.layers.Dense(128, activation='relu'),
    tf.keras.layers.Dense(10)
])
loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

# The learning rate is scaled by the number of ranks, now and after each reset.
base_lr = 0.001
optimizer = hvd.DistributedOptimizer(tf.keras.optimizers.Adam(base_lr * hvd.size()))
model.compile(optimizer=optimizer, loss=loss_fn, metrics=['accuracy'])

# ELASTIC: what is kept across membership changes, and the callbacks that
# advance and commit it (CommitStateCallback last: it commits what the
# others updated).
state = hvd.elastic.KerasState(model, batch=0, epoch=0)


def on_state_reset():
    # ELASTIC: the job may have another number of ranks now.
    model.optimizer.learning_rate.assign(base_lr * hvd.size())


state.register_reset_callbacks([on_state_reset])

callbacks = [
    hvd.callbacks.MetricAverageCallback(),
    hvd.elastic.UpdateBatchStateCallback(state),
    hvd.elastic.UpdateEpochStateCallback(state),
    hvd.elastic.CommitStateCallback(state, batches_per_commit=args.batches_per_commit),
]


# ELASTIC: run again from the last commit whenever the membership changes.
@hvd.elastic.run
def train(state):
    rank, size = hvd.rank(), hvd.size()
    images, labels = train_images[rank::size], train_labels[rank::size]
    steps = args.steps_per_epoch or max(1, len(train_labels) // (args.batch_size * size))
    dataset = tf.data.Dataset.from_tensor_slices((images, labels)).repeat() \
        .shuffle(10000, seed=rank).batch(args.batch_size)
    # ELASTIC: only the epochs not yet finished.
    return state.model.fit(dataset, steps_per_epoch=steps, epochs=args.epochs - state.epoch,
                           callbacks=callbacks, shuffle=False, verbose=1 if rank == 0 else 0)


history = train(state)

# The report: a checksum of the weights (equal on every rank) and the
# accuracy, on the training data and on the test set.
digest = hashlib.sha256()
for v in model.variables:
    digest.update(np.ascontiguousarray(v.numpy()).tobytes())
test_images = load_idx("t10k-images-idx3-ubyte.gz")
test_labels = load_idx("t10k-labels-idx1-ubyte.gz")
_, test_acc = model.evaluate(test_images, test_labels, batch_size=1024, verbose=0)
train_acc = history.history['accuracy'][-1] if history.history.get('accuracy') else float('nan')
print(f"rank {hvd.rank()}/{hvd.size()}: epoch {state.epoch} weights sha256 "
      f"{digest.hexdigest()[:16]} train accuracy {train_acc:.4f} test accuracy {test_acc:.4f}",
      flush=True)
