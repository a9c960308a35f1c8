"""Process sets and grouped collectives in an elastic job, for the tests.

    elastic_sets_worker.py --steps 40 --victim 1 --die-at 12 [--step-sleep 0.05]

Every step runs, besides elastic_worker's full-batch descent (so the final
weights are checked the same way):
  - a grouped allreduce over the whole job of [rank + 1 (3 values), ones(5)],
    expected [size * (size + 1) / 2, size];
  - an allreduce over the process set {0, 1} of the epoch (added with
    add_process_set at the start and again in a reset callback: a reset ends
    the old epoch's sets), expected 0 + 1 = 1 on its members (rank 2, when
    there is one, is outside the set and skips it).
Each step's outcome is recorded as [epoch, step, size, ok, detail]. In the
reset callback, before the set is added again, the old epoch's ProcessSet is
probed (its size, and an allreduce on it) and what happened is recorded: that
is how the test documents that the old sets are gone.

The process that started as rank R (not a joiner) dies by SIGKILL before step
S, writing the time to $KOLO_TEST_OUT/death.time. Each process that finishes
writes $KOLO_TEST_OUT/rank<final rank>.json.
"""

import argparse
import json
import os
import sys
import time

import numpy as np

import kolo
import kolo.elastic

from elastic_worker import DIMS, LR, ROWS, die, global_gradient, problem, reference

PAIR = [0, 1]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--victim", type=int, default=-1)
    p.add_argument("--die-at", type=int, default=-1)
    p.add_argument("--step-sleep", type=float, default=0.0)
    a = p.parse_args()
    out = os.environ["KOLO_TEST_OUT"]
    joiner = os.environ.get("KOLO_ELASTIC_JOINER") == "1"
    doomed = a.die_at >= 0 and not joiner and int(os.environ.get("KOLO_RANK", "0")) == a.victim

    kolo.init()
    x, y = problem()
    state = kolo.elastic.ObjectState(step=0, w=np.zeros(DIMS))
    record = {"joiner": joiner, "pid": os.getpid(), "resets": 0, "steps_log": [],
              "old_set_probes": [], "set_ids": []}
    sets = {"pair": kolo.add_process_set(PAIR)}
    record["set_ids"].append([kolo.elastic.epoch(), sets["pair"].process_set_id])

    def probe(what, fn):
        try:
            return f"{what}: returned {fn()!r}"
        except Exception as e:  # noqa: BLE001 — the error is what is recorded
            return f"{what}: {type(e).__name__}: {e}"

    def on_reset():
        record["resets"] += 1
        old = sets["pair"]
        old_id = record["set_ids"][-1][1]  # the reset retired the object's id
        record["old_set_probes"].append({
            "epoch": kolo.elastic.epoch(), "old_id": old_id,
            "object": probe("object", old.size),
            "size": probe("size", lambda: kolo._native.core.process_set_size(old_id)),
            "allreduce": probe("allreduce", lambda: kolo.allreduce(
                np.ones(1), op=kolo.Sum, name="probe.old_set", process_set=old_id).tolist()),
        })
        sets["pair"] = kolo.add_process_set(PAIR)
        record["set_ids"].append([kolo.elastic.epoch(), sets["pair"].process_set_id])

    state.register_reset_callbacks([on_reset])

    @kolo.elastic.run
    def train(state):
        while state.step < a.steps:
            if doomed and state.step >= a.die_at:
                die(out)
            rank, size = kolo.rank(), kolo.size()
            total = global_gradient(x, y, state.w)

            got = kolo.grouped_allreduce([np.full(3, rank + 1.0), np.ones(5)], op=kolo.Sum,
                                         name="grouped")
            want = [np.full(3, size * (size + 1) / 2.0), np.full(5, float(size))]
            ok = all(np.array_equal(g, w) for g, w in zip(got, want))
            detail = f"grouped {[g.tolist() for g in got]}"
            ps = sets["pair"]
            if rank in PAIR:
                pair = kolo.allreduce(np.array([float(rank)]), op=kolo.Sum, name="pair",
                                      process_set=ps)
                ok = ok and pair.tolist() == [1.0]
                detail += f"; pair set {ps.process_set_id}: {pair.tolist()}"
            else:
                detail += "; outside the pair set"

            state.w = state.w - LR * total / ROWS
            state.step += 1
            record["steps_log"].append([kolo.elastic.epoch(), state.step, size, ok, detail])
            state.commit()
            if a.step_sleep:
                time.sleep(a.step_sleep)

    train(state)
    rank = kolo.rank()
    record.update(rank=rank, size=kolo.size(), epoch=kolo.elastic.epoch(),
                  w=state.w.tolist(), reference=reference(a.steps).tolist(), steps=state.step)
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(record, f)
    kolo.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
