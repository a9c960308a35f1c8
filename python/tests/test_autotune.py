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
