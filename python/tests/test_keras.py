"""Horovod Keras programs on kolo.tensorflow.keras under both Keras that
TensorFlow 2.20 offers: Keras 3 and Keras 2 (the tf_keras package, chosen by
TF_USE_LEGACY_KERAS=1 before TensorFlow is imported, so those ranks are
started with it in their environment). One launch per Keras and rank count
runs every check in turn."""

import importlib.util

import pytest

from conftest import worker

pytest.importorskip("tensorflow")

CHECKS = [
    "keras_keyword_of_the_running_keras",
    "every_optimizer_family_and_subclass_trains_on_the_average",
    "a_wrong_optimizer_is_refused_with_the_families_named",
    "backward_passes_per_step_aggregate_and_meet_inf_gradients",
    "partial_distributed_optimizer_keeps_local_layers_local",
    "partial_distributed_gradient_tape_on_keras_variables",
    "broadcast_callback_leaves_local_variables_alone",
    "sync_batch_normalization_matches_one_process",
    "horovod_keras_program_with_callbacks",
    "load_model_keeps_the_optimizer_state_and_trains_on_the_average",
    "distributed_model_and_best_model_checkpoint",
]

KERAS = {"keras3": {"TF_USE_LEGACY_KERAS": "0"}, "tf_keras": {"TF_USE_LEGACY_KERAS": "1"}}
_runs = {}


@pytest.fixture(params=[(k, n) for k in KERAS for n in (2, 3)],
                ids=[f"{k}-np{n}" for k in KERAS for n in (2, 3)])
def keras_run(request, launch):
    which, n = request.param
    if which == "tf_keras" and importlib.util.find_spec("tf_keras") is None:
        pytest.fail("tf_keras is not installed: python/requirements.txt pins it")
    if request.param not in _runs:
        _runs[request.param] = launch(n, worker("keras_worker.py"), timeout=300,
                                      env=KERAS[which])
    return _runs[request.param]


@pytest.mark.parametrize("name", CHECKS)
def test_keras_program(keras_run, name):
    keras_run.check(name)


def test_every_worker_check_is_listed(keras_run):
    unlisted = keras_run.reported() - set(CHECKS)
    assert not unlisted, f"checks the worker ran but CHECKS does not list: {sorted(unlisted)}"


def test_every_rank_exits_cleanly(keras_run):
    assert keras_run.returncode == 0, keras_run.output[-3000:]
