"""Runs a worker's checks in order on every rank and writes rank<N>.json with
{check: "ok" | error text} under $KOLO_TEST_OUT."""

import json
import os
import traceback

CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def run(rank_fn):
    results = {}
    out = os.environ["KOLO_TEST_OUT"]
    rank = rank_fn()

    def flush():
        tmp = os.path.join(out, f".rank{rank}.json")
        with open(tmp, "w") as f:
            json.dump(results, f)
        os.replace(tmp, os.path.join(out, f"rank{rank}.json"))

    for fn in CHECKS:
        try:
            fn()
            results[fn.__name__] = "ok"
        except BaseException as e:  # noqa: BLE001 - reported, not swallowed
            results[fn.__name__] = f"{type(e).__name__}: {e}\n{traceback.format_exc()[-1500:]}"
        flush()
    flush()
