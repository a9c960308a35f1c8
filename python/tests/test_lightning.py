"""kolo.lightning.KoloStrategy on 1 and 2 ranks (one launch per rank count):
Lightning's Trainer fits a small MLP by full-batch gradient descent with every
rank ending on the same weights as one process training on the whole batch
(within 1e-5); the strategy's reduce, broadcast, barrier and all_gather, its
ranks and DistributedSampler, checkpoints written by rank 0 only, a later
validate and second fit, and Trainer(strategy="kolo")."""

import pytest

from conftest import worker

pytest.importorskip("torch")
pytest.importorskip("lightning")

CHECKS = [
    "fit_runs", "weights_identical_on_every_rank", "matches_single_process_training",
    "logged_loss_is_the_mean_over_ranks", "distributed_sampler_splits_the_data", "ranks",
    "reduce", "broadcast", "barrier", "all_gather", "all_gather_sync_grads",
    "checkpoint_written_by_rank_zero_only", "validate_after_fit",
    "second_fit_keeps_ranks_in_step", "strategy_by_name",
]

_runs = {}


@pytest.fixture(params=[1, 2], ids=["np1", "np2"])
def lightning_run(request, launch):
    n = request.param
    if n not in _runs:
        _runs[n] = launch(n, worker("lightning_worker.py"), timeout=300)
    return _runs[n]


def test_every_check_is_listed(lightning_run):
    assert lightning_run.reported() == set(CHECKS)
    assert lightning_run.returncode == 0, lightning_run.output[-4000:]


@pytest.mark.parametrize("name", CHECKS)
def test_lightning(lightning_run, name):
    lightning_run.check(name)
