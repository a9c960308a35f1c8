"""HOROVOD_AUTOTUNE and the job's HOROVOD_* settings, on 2 and 3 ranks of one
kolod: the tuner's samples in rank 0's HOROVOD_AUTOTUNE_LOG, results right
while the fusion threshold changes, ranks that disagree on a setting, a
value the SDK refuses, and the notes for settings that change nothing."""

import pytest

from conftest import kolorun_job, rank_records, RankRun, worker

_runs = {}


def _run(n, mode, env=None):
    key = (n, mode, tuple(sorted((env or {}).items())))
    if key not in _runs:
        code, output, results, _ = kolorun_job(n, worker("autotune_worker.py"), [mode],
                                               timeout=240, env=env, collect=rank_records)
        _runs[key] = RankRun(code, output, results)
    return _runs[key]


@pytest.mark.parametrize("n", [2, 3])
def test_results_are_right_while_the_tuner_changes_the_threshold(n):
    _run(n, "tune").check("steps_run_right_while_the_threshold_changes")


@pytest.mark.parametrize("n", [2, 3])
def test_rank_0_logs_every_sample_and_the_threshold_kept(n):
    run = _run(n, "tune")
    run.check("log_holds_every_sample_and_the_kept_threshold")
    assert run.returncode == 0, run.output[-3000:]


@pytest.mark.parametrize("n", [2, 3])
def test_ranks_that_ask_for_other_settings_are_refused(n):
    run = _run(n, "mismatch")
    run.check("the_second_rank_to_attach_is_refused_naming_the_setting")
    assert "asks for fusion threshold (HOROVOD_FUSION_THRESHOLD)" in run.output


def test_a_value_the_sdk_cannot_read_fails_init_on_every_rank():
    _run(2, "bad").check("init_fails_naming_the_variable")


def test_settings_that_change_nothing_are_noted_once_by_rank_0():
    env = {"HOROVOD_CYCLE_TIME": "5", "HOROVOD_HIERARCHICAL_ALLREDUCE": "1",
           "HOROVOD_GPU_OPERATIONS": "MPI", "HOROVOD_NOT_A_SETTING": "1",
           "HOROVOD_TIMELINE_MARK_CYCLES": "1"}
    run = _run(2, "notes", env)
    run.check("init_goes_on")
    out = run.output
    assert out.count("HOROVOD_CYCLE_TIME=5: changes nothing here: Kolo has no cycle") == 1, out
    assert "HOROVOD_HIERARCHICAL_ALLREDUCE=1: changes nothing here" in out
    assert "HOROVOD_GPU_OPERATIONS=MPI: changes nothing here: kolod runs collectives over " \
        "device tensors on NCCL" in out
    assert "HOROVOD_NOT_A_SETTING: not a Horovod setting Kolo knows" in out
    assert "HOROVOD_TIMELINE_MARK_CYCLES=1: changes nothing here" in out


_TWO_NODES = """
import os, sys, time
import numpy as np
import kolo
mode, out = sys.argv[1], sys.argv[2]
rank = int(os.environ["KOLO_RANK"])
try:
    kolo.init()
except Exception as e:
    print("init failed:", e)
    raise
R, N = kolo.rank(), kolo.size()
if mode == "tune":
    for step in range(32):
        hs = [(kolo.allreduce_async(np.full(s, float(step + i), np.float32), op=kolo.Sum,
                                    name=f"g{i}"), step + i)
              for i, s in enumerate([60000, 8, 300000, 5000])]
        for h, base in hs:
            got = kolo.synchronize(h)
            assert np.all(got == N * base), (step, got[:2], N * base)
    print("steps ok")
else:
    try:
        kolo.allreduce(np.ones(4), op=kolo.Sum, name="first")
        print("allreduce ran")
    except Exception as e:
        print("allreduce failed:", e)
    open(os.path.join(out, f"done.{rank}"), "w").close()
    # Rank 0's node waits for the other node's ranks to have seen their error.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all(
            os.path.exists(os.path.join(out, f"done.{r}")) for r in range(4)):
        time.sleep(0.05)
kolo.shutdown()
"""


def _two_node_job(tmp_path, mode, env_of):
    """4 ranks, 2 on each of two kolods; env_of(rank) adds to a rank's
    environment. Returns each rank's (exit status, output)."""
    import subprocess
    import sys

    from conftest import rank_env, two_nodes
    ranks = []
    with two_nodes(tmp_path) as (sockets, coordinator):
        try:
            for r in range(4):
                env = rank_env(sockets, coordinator, f"autotune-{mode}", r, 4)
                env.update(env_of(r))
                ranks.append(subprocess.Popen(
                    [sys.executable, "-c", _TWO_NODES, mode, str(tmp_path)], env=env, text=True,
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
            return [(p.wait(timeout=180), p.stdout.read()) for p in ranks]
        finally:
            for p in ranks:
                if p.poll() is None:
                    p.kill()


def test_across_two_kolods_the_coordinator_tunes_and_rank_0_logs(tmp_path):
    log = str(tmp_path / "tune.csv")
    env = {"HOROVOD_AUTOTUNE": "1", "HOROVOD_AUTOTUNE_LOG": log,
           "HOROVOD_AUTOTUNE_WARMUP_SAMPLES": "1", "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE": "2",
           "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES": "5"}
    results = _two_node_job(tmp_path, "tune", lambda r: env)
    for r, (code, out) in enumerate(results):
        assert code == 0 and "steps ok" in out, f"rank {r}: {out[-2000:]}"
    lines = open(log).read().splitlines()
    assert lines[0].startswith("sample,fusion_threshold_bytes,"), lines
    rows = [l for l in lines[1:] if not l.startswith("#")]
    assert len(rows) in (6, 12), lines
    assert sum(l.startswith("# kept fusion_threshold_bytes=") for l in lines) == 1, lines


def test_across_two_kolods_a_node_that_asks_for_other_settings_is_refused(tmp_path):
    results = _two_node_job(
        tmp_path, "mismatch",
        lambda r: {"HOROVOD_FUSION_THRESHOLD": "1048576"} if r >= 2 else {})
    # The coordinator refuses node 1 and ends the job on both nodes.
    for r in range(4):
        code, out = results[r]
        assert "allreduce failed" in out and "asks for fusion threshold " \
            "(HOROVOD_FUSION_THRESHOLD) 1048576 bytes, the coordinator's node for kolod's " \
            "default" in out, f"rank {r}: {out[-2000:]}"
