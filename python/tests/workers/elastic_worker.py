"""An elastic training job for the tests: full-batch gradient descent on a
fixed linear-regression problem, the rows sharded over however many ranks
the epoch has (so the result does not depend on the membership), with
kolo.elastic.ObjectState committed every step.

    elastic_worker.py --steps 60 [--victim R --die-at S] [--step-sleep 0.02]
                      [--koloctl PATH] [--grow-at S]

The process that started as rank R (KOLO_RANK, not a joiner) kills itself
with SIGKILL before step S, writing the time to $KOLO_TEST_OUT/death.time;
--die-again makes joiners die too (to run the job below --min-np). Each
process that finishes writes $KOLO_TEST_OUT/rank<final rank>.json: the
weights, its rank, size and epoch, whether it joined, its resets and when
each epoch completed its first step, and its pid. --grow-at S: rank 0 creates
$KOLO_TEST_OUT/grow after step S (a discovery script the test writes then
lists one slot more). With --koloctl, the final
rank 0 runs `PATH --socket $KOLO_SOCKET job $KOLO_JOB_ID` (text and --json)
before it shuts down and keeps the output in its record (kolorun's private
kolod, and the job's epoch history with it, is gone once the job ends).
"""

import argparse
import json
import os
import signal
import subprocess
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


def die(out):
    """SIGKILLs this process, writing when to $KOLO_TEST_OUT/death.time."""
    with open(os.path.join(out, "death.time"), "a") as f:
        f.write(f"{time.time()}\n")
    os.kill(os.getpid(), signal.SIGKILL)


def global_gradient(x, y, w, name="grad"):
    """This rank's rows of the full-batch gradient, summed over the epoch's
    ranks."""
    rank, size = kolo.rank(), kolo.size()
    xs, ys = x[rank::size], y[rank::size]
    return kolo.allreduce(2.0 * xs.T @ (xs @ w - ys), op=kolo.Sum, name=name)


def reference(steps):
    """The same descent in one process: what every rank must end with."""
    x, y = problem()
    w = np.zeros(DIMS)
    for _ in range(steps):
        w -= LR * (2.0 / ROWS) * x.T @ (x @ w - y)
    return w


def koloctl_job(koloctl):
    """`koloctl job` for this job on the rank's kolod: {"text", "json"}, or
    the error of either call."""
    out = {}
    base = [koloctl, "--socket", os.environ["KOLO_SOCKET"]]
    for key, extra in (("text", []), ("json", ["--json"])):
        try:
            proc = subprocess.run(base + extra + ["job", os.environ["KOLO_JOB_ID"]],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, timeout=20)
            out[key] = proc.stdout if proc.returncode == 0 else \
                f"koloctl exited with {proc.returncode}: {proc.stdout}"
        except (OSError, subprocess.TimeoutExpired) as e:
            out[key] = f"koloctl failed: {e}"
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--victim", type=int, default=-1)
    p.add_argument("--die-at", type=int, default=-1)
    p.add_argument("--die-again", action="store_true")
    p.add_argument("--step-sleep", type=float, default=0.0)
    p.add_argument("--koloctl", default="")
    p.add_argument("--grow-at", type=int, default=-1)
    a = p.parse_args()
    out = os.environ["KOLO_TEST_OUT"]
    joiner = os.environ.get("KOLO_ELASTIC_JOINER") == "1"
    first_rank = int(os.environ.get("KOLO_RANK", "0"))
    doomed = a.die_at >= 0 and ((not joiner and first_rank == a.victim) or
                                (joiner and a.die_again))

    kolo.init()
    x, y = problem()
    state = kolo.elastic.ObjectState(step=0, w=np.zeros(DIMS))
    record = {"joiner": joiner, "resets": 0, "epochs": {}, "pid": os.getpid(),
              "first_rank": first_rank}

    def on_reset():
        record["resets"] += 1
        record["reset_done"] = time.time()

    state.register_reset_callbacks([on_reset])

    @kolo.elastic.run
    def train(state):
        while state.step < a.steps:
            if doomed and state.step >= a.die_at:
                die(out)
            rank, size = kolo.rank(), kolo.size()
            total = global_gradient(x, y, state.w)
            state.w = state.w - LR * total / ROWS
            state.step += 1
            epoch = str(kolo.elastic.epoch())
            if epoch not in record["epochs"]:
                record["epochs"][epoch] = {"first_step_done": time.time(), "size": size,
                                           "step": state.step}
            if state.step == a.grow_at and rank == 0:
                open(os.path.join(out, "grow"), "w").close()
            state.commit()
            if a.step_sleep:
                time.sleep(a.step_sleep)

    train(state)
    rank = kolo.rank()
    record.update(rank=rank, size=kolo.size(), epoch=kolo.elastic.epoch(),
                  w=state.w.tolist(), reference=reference(a.steps).tolist(),
                  steps=state.step)
    if a.koloctl and rank == 0:
        record["koloctl"] = koloctl_job(a.koloctl)
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(record, f)
    kolo.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
