"""Adasum (op=Adasum) on 2, 3 and 4 ranks of one kolod, against a NumPy
reference of the formula and of kolo's tree (one launch per rank count)."""

import pytest

from conftest import worker

CHECKS = [
    "numpy_allreduce_matches_reference", "orthogonal_tensors_add_and_equal_ones_stay",
    "grouped_allreduce_combines_each_tensor_alone", "scale_factors_scale_the_result",
    "zero_tensor_on_a_rank_leaves_the_others", "process_set_combines_its_ranks_only",
    "integer_tensors_raise_on_every_rank", "torch_allreduce_and_optimizer",
    "torch_optimizer_combines_weight_changes", "tensorflow_allreduce",
]

_runs = {}


@pytest.fixture(params=[2, 3, 4], ids=["np2", "np3", "np4"])
def adasum_run(request, launch):
    n = request.param
    if n not in _runs:
        _runs[n] = launch(n, worker("adasum_worker.py"), timeout=240)
    return _runs[n]


@pytest.mark.parametrize("name", CHECKS)
def test_adasum(adasum_run, name):
    adasum_run.check(name)


def test_every_worker_check_is_listed(adasum_run):
    unlisted = adasum_run.reported() - set(CHECKS)
    assert not unlisted, f"checks the worker ran but CHECKS does not list: {sorted(unlisted)}"


def test_every_rank_exits_cleanly(adasum_run):
    assert adasum_run.returncode == 0, adasum_run.output[-3000:]
