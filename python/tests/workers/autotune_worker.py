"""Autotuning and the job's HOROVOD_* settings on every rank (see harness.py).

argv[1] says which run this is:
  tune      HOROVOD_AUTOTUNE=1 with small sample counts: steps of six named
            allreduces run while kolod tunes the fusion threshold; rank 0's
            HOROVOD_AUTOTUNE_LOG then holds every sample and the one kept.
  mismatch  rank 1 asks for another HOROVOD_FUSION_THRESHOLD than rank 0:
            whichever attaches second is refused, naming the setting.
  bad       HOROVOD_FUSION_THRESHOLD=banana: init fails on every rank.
  notes     settings that change nothing here: init goes on (rank 0 notes them).
"""

import csv
import os
import sys
import time

import numpy as np

import kolo
from harness import check, run

MODE = sys.argv[1]
RANK = int(os.environ["KOLO_RANK"])
LOG = os.path.join(os.environ["KOLO_TEST_OUT"], "autotune.csv")
# Warm-up 1, 6 samples of 2 steps, and 6 more where the model's best is
# checked against the start: the tuner is done after at most 1 + 2 * 13 steps.
TUNE_ENV = {
    "HOROVOD_AUTOTUNE": "1",
    "HOROVOD_AUTOTUNE_LOG": LOG,
    "HOROVOD_AUTOTUNE_WARMUP_SAMPLES": "1",
    "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE": "2",
    "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES": "6",
}
SIZES = [70000, 30000, 500000, 8, 1000, 250000]  # float32 elements of each name
STEPS = 32


def expect(cond, msg):
    if not cond:
        raise AssertionError(msg)


init_error = None
if MODE == "tune":
    os.environ.update(TUNE_ENV)
elif MODE == "mismatch":
    os.environ["HOROVOD_FUSION_THRESHOLD"] = str((1 + RANK) << 20)
elif MODE == "bad":
    os.environ["HOROVOD_FUSION_THRESHOLD"] = "banana"
try:
    kolo.init()
except Exception as e:  # noqa: BLE001 - what the checks look at
    init_error = e


def candidates(bound):
    c = {0, bound}
    t = 64 << 10
    while t < bound:
        c.add(t)
        t *= 2
    return c


if MODE == "tune":

    @check
    def steps_run_right_while_the_threshold_changes():
        expect(init_error is None, f"init: {init_error}")
        n = kolo.size()
        for step in range(STEPS):
            handles = []
            for i, size in enumerate(SIZES):
                t = np.full(size, float(RANK + step + i), np.float32)
                handles.append((kolo.allreduce_async(t, op=kolo.Sum, name=f"grad/{i}"), step + i))
            for h, base in handles:
                got = kolo.synchronize(h)
                want = n * base + n * (n - 1) / 2
                expect(np.all(got == want), f"step {step}: {got[:3]} != {want}")

    @check
    def log_holds_every_sample_and_the_kept_threshold():
        kolo.shutdown()  # the last samples are written before the session ends
        if RANK != 0:
            expect(not os.path.exists(LOG) or os.path.getsize(LOG) > 0, "rank 0 writes the log")
            return
        with open(LOG) as f:
            lines = f.read().splitlines()
        expect(lines[0] == "sample,fusion_threshold_bytes,score_bytes_per_second,steps,seconds,"
               "warmup", f"header {lines[0]!r}")
        kept = [l for l in lines if l.startswith("# kept fusion_threshold_bytes=")]
        expect(len(kept) == 1, f"one kept line: {lines}")
        rows = list(csv.DictReader([l for l in lines if not l.startswith("#")]))
        expect(len(rows) in (7, 13), f"{len(rows)} samples: {rows}")
        expect([int(r["sample"]) for r in rows] == list(range(len(rows))), f"samples {rows}")
        expect([r["warmup"] for r in rows] == ["1"] + ["0"] * (len(rows) - 1),
               f"warmup flags {rows}")
        start = int(rows[0]["fusion_threshold_bytes"])
        expect(int(rows[1]["fusion_threshold_bytes"]) == start,
               "the first sample measures the threshold the job started with")
        allowed = candidates(start)
        means = {}
        for r in rows:
            t = int(r["fusion_threshold_bytes"])
            expect(t in allowed, f"threshold {t} not a candidate")
            expect(int(r["steps"]) == 2 and float(r["seconds"]) > 0, f"row {r}")
            expect(float(r["score_bytes_per_second"]) > 0, f"row {r}")
            if r["warmup"] == "0":
                means.setdefault(t, []).append(float(r["score_bytes_per_second"]))
        kept_bytes = int(kept[0].split("=")[1])
        expect(kept_bytes in means, f"kept {kept[0]}, not sampled: {means}")
        if len(rows) == 13:
            # The model's best and the start, in turns; the start is kept
            # unless the other beat it there.
            best = int(rows[7]["fusion_threshold_bytes"])
            turns = [int(r["fusion_threshold_bytes"]) for r in rows[7:]]
            expect(turns == [best, start] * 3, f"the check's samples {turns}")
            expect(kept_bytes in (best, start), f"kept {kept_bytes}")
        expect(len(means) > 1, f"the tuner tried more than one threshold: {means}")

elif MODE == "mismatch":

    @check
    def the_second_rank_to_attach_is_refused_naming_the_setting():
        # A rank that attached stays until every other rank has tried.
        out = os.environ["KOLO_TEST_OUT"]
        open(os.path.join(out, f"tried.{RANK}"), "w").close()
        size = int(os.environ["KOLO_SIZE"])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(
                os.path.exists(os.path.join(out, f"tried.{r}")) for r in range(size)):
            time.sleep(0.05)
        if init_error is None:
            if size == 2:
                # The job cannot run without the refused rank: it ended, saying why.
                try:
                    kolo.allreduce(np.ones(2), name="after")
                    raise AssertionError("the job ran without the refused rank")
                except AssertionError:
                    raise
                except Exception as e:  # noqa: BLE001 - the error is the check
                    expect("fusion threshold (HOROVOD_FUSION_THRESHOLD)" in str(e), str(e))
            kolo.shutdown()
            return
        msg = str(init_error)
        expect("fusion threshold (HOROVOD_FUSION_THRESHOLD)" in msg, msg)
        expect("every rank of a job must set the same" in msg, msg)

elif MODE == "notes":

    @check
    def init_goes_on():
        expect(init_error is None, f"init: {init_error}")
        expect(kolo.allreduce(np.ones(3), op=kolo.Sum, name="x")[0] == kolo.size(), "allreduce")
        kolo.shutdown()

else:

    @check
    def init_fails_naming_the_variable():
        expect(init_error is not None, "init accepted HOROVOD_FUSION_THRESHOLD=banana")
        expect('HOROVOD_FUSION_THRESHOLD="banana": want a byte count' in str(init_error),
               str(init_error))


run(lambda: RANK)
