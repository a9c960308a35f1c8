"""An elastic Keras job for the tests: a linear model compiled with a
kolo.tensorflow DistributedOptimizer (SGD with momentum) and trained by
model.fit with kolo.tensorflow.keras.elastic's callbacks and KerasState; the
rows are sharded over however many ranks the epoch has.

    elastic_tf_worker.py --epochs 4 --steps 5 [--batches-per-commit 1]
                         [--victim R --die-at S] [--step-sleep 0.1] [--tensorflow-state]
                         [--final-size N]
    elastic_tf_worker.py --tf1-graph

The process that started as rank R (not a joiner) kills itself with SIGKILL
before its S-th batch; with --final-size the ranks finish only once the
job has N ranks again. Every commit is logged as (state.epoch, state.batch).
--tensorflow-state then also trains a few tf.Variables in a custom loop kept
by kolo.tensorflow.elastic.TensorFlowState; --tf1-graph instead checks
TensorFlowState in a TF1 graph with a session. Each process that finishes
writes $KOLO_TEST_OUT/rank<final rank>.json.
"""

import argparse
import json
import os
import signal
import sys
import time

import keras
import numpy as np
import tensorflow as tf

import kolo.tensorflow as hvd
import kolo.tensorflow.keras as hvdk

ROWS, DIMS, BATCH = 60, 5, 2


def problem():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((ROWS, DIMS)).astype(np.float32)
    y = (x @ rng.standard_normal((DIMS, 1))).astype(np.float32)
    return x, y


def values(variables):
    return [np.asarray(v.numpy()).tolist() for v in variables]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--batches-per-commit", type=int, default=1)
    p.add_argument("--victim", type=int, default=-1)
    p.add_argument("--die-at", type=int, default=-1)
    p.add_argument("--step-sleep", type=float, default=0.0)
    p.add_argument("--tensorflow-state", action="store_true")
    p.add_argument("--final-size", type=int, default=0)
    p.add_argument("--tf1-graph", action="store_true")
    a = p.parse_args()
    out = os.environ["KOLO_TEST_OUT"]
    if a.tf1_graph:
        return tf1_graph_check(out)
    joiner = os.environ.get("KOLO_ELASTIC_JOINER") == "1"
    first_rank = int(os.environ.get("KOLO_RANK", "0"))
    doomed = a.die_at >= 0 and not joiner and first_rank == a.victim

    hvdk.init()
    keras.utils.set_random_seed(100 + first_rank + (50 if joiner else 0))  # differs per process
    x, y = problem()
    model = keras.Sequential([keras.Input((DIMS,)), keras.layers.Dense(1)])
    model.compile(optimizer=hvdk.DistributedOptimizer(
        keras.optimizers.SGD(learning_rate=0.05, momentum=0.5)), loss="mse")
    state = hvdk.elastic.KerasState(model, batch=0, epoch=0)
    record = {"joiner": joiner, "resets": 0, "sizes": [], "commits": [], "batches": 0}

    commit = state.commit

    def logged_commit():
        record["commits"].append([state.epoch, state.batch])
        commit()

    state.commit = logged_commit

    def on_reset():
        record["resets"] += 1

    state.register_reset_callbacks([on_reset])

    class Steps(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if doomed and record["batches"] >= a.die_at:
                os.kill(os.getpid(), signal.SIGKILL)

        def on_train_batch_end(self, batch, logs=None):
            record["batches"] += 1
            if a.step_sleep:
                time.sleep(a.step_sleep)

    callbacks = [Steps(), hvdk.elastic.UpdateBatchStateCallback(state),
                 hvdk.elastic.UpdateEpochStateCallback(state),
                 hvdk.elastic.CommitStateCallback(state, a.batches_per_commit)]

    @hvdk.elastic.run
    def train(state):
        rank, size = hvdk.rank(), hvdk.size()
        if size not in record["sizes"]:
            record["sizes"].append(size)
        data = tf.data.Dataset.from_tensor_slices((x[rank::size], y[rank::size]))
        model.fit(data.repeat().batch(BATCH), steps_per_epoch=a.steps,
                  epochs=a.epochs - state.epoch, callbacks=callbacks, shuffle=False, verbose=0)
        # Trained out: commit until the restarted rank joined (see
        # elastic_torch_worker.wait_for_joiners).
        deadline = time.monotonic() + 60
        while hvd.size() < a.final_size and time.monotonic() < deadline:
            time.sleep(0.05)
            state.commit()

    train(state)
    loss = float(np.mean((model.predict(x, verbose=0) - y) ** 2))
    record.update(rank=hvdk.rank(), size=hvdk.size(), epoch=state.epoch, batch=state.batch,
                  weights=values(model.weights),
                  optimizer=values(model.optimizer.variables), final_loss=loss,
                  first_loss=float(np.mean(y ** 2)))
    if a.tensorflow_state:
        record["tensorflow_state"] = tensorflow_state_check()
    with open(os.path.join(out, f"rank{hvdk.rank()}.json"), "w") as f:
        json.dump(record, f)
    hvd.shutdown()
    return 0


def tensorflow_state_check():
    """TensorFlowState over plain variables: sync makes rank 0's values
    everyone's, commit and restore keep and bring back a copy."""
    rank = hvd.rank()
    w = tf.Variable(np.full([3], float(rank + 1), np.float32))
    b = tf.Variable(float(10 * (rank + 1)))
    state = hvd.elastic.TensorFlowState([w, b], step=0)
    seen = {}

    @hvd.elastic.run
    def steps(state):
        seen["after_sync"] = values([w, b])
        while state.step < 3:
            grad = hvd.allreduce(tf.fill([3], float(hvd.rank() + 1)), op=hvd.Sum, name="tfs.grad")
            w.assign_sub(0.5 * grad)
            b.assign_add(1.0)
            state.step += 1
            state.commit()

    steps(state)
    seen["trained"] = values([w, b])
    w.assign(np.zeros([3], np.float32))
    b.assign(-1.0)
    state.step = 99
    state.restore()
    seen["restored"] = values([w, b])
    seen["restored_step"] = state.step
    return seen


def tf1_graph_check(out):
    """TensorFlowState in a TF1 graph through a session: sync from rank 0,
    three committed steps, then restore after a step that was not
    committed."""
    tf.compat.v1.disable_eager_execution()
    hvd.init()
    v = tf.compat.v1.Variable([float(hvd.rank() + 1), 0.0])
    step = v.assign_add([1.0, 10.0])
    sess = tf.compat.v1.Session()
    sess.run(tf.compat.v1.global_variables_initializer())
    state = hvd.elastic.TensorFlowState(session=sess, step=0)
    seen = {}

    @hvd.elastic.run
    def steps(state):
        seen["after_sync"] = sess.run(v).tolist()
        while state.step < 3:
            sess.run(step)
            state.step += 1
            state.commit()

    steps(state)
    seen["trained"] = sess.run(v).tolist()
    sess.run(step)
    state.step = 99
    state.restore()
    seen["restored"] = sess.run(v).tolist()
    seen["restored_step"] = state.step
    with open(os.path.join(out, f"rank{hvd.rank()}.json"), "w") as f:
        json.dump({"joiner": False, "tf1_graph": seen}, f)
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
