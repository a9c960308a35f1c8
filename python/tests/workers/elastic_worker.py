"""An elastic training job for the tests: full-batch gradient descent on a
fixed linear-regression problem, the rows sharded over however many ranks
the epoch has (so the result does not depend on the membership), with
kolo.elastic.ObjectState committed every step.

    elastic_worker.py --steps 60 [--victim R --die-at S] [--step-sleep 0.02]

The process that started as rank R (KOLO_RANK, not a joiner) kills itself
with SIGKILL before step S, writing the time to $KOLO_TEST_OUT/death.time;
--die-again makes joiners die too (to run the job below --min-np). Each
process that finishes writes $KOLO_TEST_OUT/rank<final rank>.json: the
weights, its rank, size and epoch, whether it joined, its resets and when
each epoch completed its first step.
"""

import argparse
import json
import os
import signal
import sys
import time

import numpy as np

import kolo
import kolo.elastic

ROWS, DIMS, LR = 240, 8, 0.05


def problem():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((ROWS, DIMS))
    w_true = rng.standard_normal(DIMS)
    y = x @ w_true + 0.01 * rng.standard_normal(ROWS)
    return x, y


def reference(steps):
    """The same descent in one process: what every rank must end with."""
    x, y = problem()
    w = np.zeros(DIMS)
    for _ in range(steps):
        w -= LR * (2.0 / ROWS) * x.T @ (x @ w - y)
    return w


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--victim", type=int, default=-1)
    p.add_argument("--die-at", type=int, default=-1)
    p.add_argument("--die-again", action="store_true")
    p.add_argument("--step-sleep", type=float, default=0.0)
    a = p.parse_args()
    out = os.environ["KOLO_TEST_OUT"]
    joiner = os.environ.get("KOLO_ELASTIC_JOINER") == "1"
    first_rank = int(os.environ.get("KOLO_RANK", "0"))
    doomed = a.die_at >= 0 and ((not joiner and first_rank == a.victim) or
                                (joiner and a.die_again))

    kolo.init()
    x, y = problem()
    state = kolo.elastic.ObjectState(step=0, w=np.zeros(DIMS))
    record = {"joiner": joiner, "resets": 0, "epochs": {}}

    def on_reset():
        record["resets"] += 1
        record["reset_done"] = time.time()

    state.register_reset_callbacks([on_reset])

    @kolo.elastic.run
    def train(state):
        while state.step < a.steps:
            if doomed and state.step >= a.die_at:
                with open(os.path.join(out, "death.time"), "a") as f:
                    f.write(f"{time.time()}\n")
                os.kill(os.getpid(), signal.SIGKILL)
            rank, size = kolo.rank(), kolo.size()
            xs, ys = x[rank::size], y[rank::size]
            partial = 2.0 * xs.T @ (xs @ state.w - ys)
            total = kolo.allreduce(partial, op=kolo.Sum, name="grad")
            state.w = state.w - LR * total / ROWS
            state.step += 1
            epoch = str(kolo.elastic.epoch())
            if epoch not in record["epochs"]:
                record["epochs"][epoch] = {"first_step_done": time.time(), "size": size,
                                           "step": state.step}
            state.commit()
            if a.step_sleep:
                time.sleep(a.step_sleep)

    train(state)
    rank = kolo.rank()
    record.update(rank=rank, size=kolo.size(), epoch=kolo.elastic.epoch(),
                  w=state.w.tolist(), reference=reference(a.steps).tolist(),
                  steps=state.step)
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(record, f)
    kolo.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
