"""Reads a timeline file that kolo's start_timeline/stop_timeline (or
KOLO_TIMELINE) wrote and checks it is a Chrome trace as kolod renders it."""

import json
import os
import stat


class Trace:
    """A checked trace: the event names on each thread row (rank) and the
    process rows' names."""

    def __init__(self, names_by_tid, processes):
        self.names_by_tid = names_by_tid
        self.processes = processes

    def expect_tensors(self, tensors, ranks):
        """Fails unless every phase of each tensor is on each rank's row."""
        for r in ranks:
            names = self.names_by_tid.get(r, set())
            for t in tensors:
                for phase in ("QUEUED", "NEGOTIATED", "FUSED", "REDUCED", "DONE"):
                    if f"{phase} {t}" not in names:
                        raise AssertionError(f"rank {r} has no {phase} {t} in the timeline "
                                             f"(its row has {sorted(names)[:20]})")


def read_trace(path):
    """Parses and checks the trace at `path`; returns a Trace."""
    if not os.path.isfile(path):
        raise AssertionError(f"no timeline file at {path}")
    leftovers = [n for n in os.listdir(os.path.dirname(path))
                 if n.startswith(os.path.basename(path) + ".") and n.endswith(".tmp")]
    if leftovers:
        raise AssertionError(f"temporary files left beside the timeline: {leftovers}")
    umask = os.umask(0)
    os.umask(umask)
    mode = stat.S_IMODE(os.stat(path).st_mode)
    if mode != 0o666 & ~umask:
        raise AssertionError(f"timeline mode {oct(mode)}, not {oct(0o666 & ~umask)}")
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise AssertionError(f"not a Chrome trace (no traceEvents list): {str(doc)[:300]}")
    names, processes = {}, []
    for e in doc["traceEvents"]:
        if e.get("ph") == "M":
            processes.append(e["args"]["name"])
            continue
        if e.get("ph") not in ("X", "i"):
            raise AssertionError(f"event of unknown phase: {e}")
        for key in ("pid", "tid", "ts", "name", "cat"):
            if key not in e:
                raise AssertionError(f"event without {key}: {e}")
        if e["ts"] < 0 or (e["ph"] == "X" and e.get("dur", -1) < 0):
            raise AssertionError(f"event with a negative time: {e}")
        names.setdefault(e["tid"], set()).add(e["name"])
    return Trace(names, processes)
