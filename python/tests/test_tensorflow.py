"""kolo.tensorflow on 2 and 3 ranks, eager and in tf.function (one launch per
rank count), and the Keras example on a subset of Fashion-MNIST."""

import os
import re

import pytest

from conftest import REPO, worker

pytest.importorskip("tensorflow")

CHECKS = [
    "topology", "allreduce_eager", "allreduce_function", "allreduce_dtypes_and_compression",
    "compressor_api_and_compressors_of_ones_own",
    "grouped_allreduce", "broadcast", "broadcast_variables", "broadcast_and_allgather_object",
    "objects_in_a_tf1_graph_and_broadcast_object_fn",
    "allgather", "reducescatter", "alltoall",
    "alltoall_bad_splits_raise_invalid_argument_on_every_rank", "barrier", "allreduce_gradient",
    "distributed_gradient_tape", "keras_fit_distributed_optimizer",
    "distributed_model_and_metric_average", "mismatch_raises_in_eager",
    "mismatch_raises_in_function", "mismatches_raise_in_a_tf1_graph", "horovod_names_ops_and_static_process_set",
    "broadcast_global_variables_in_a_graph", "learning_rate_callbacks_and_load_model",
    "allgather_gradient_in_a_graph_with_unknown_rows", "collectives_in_a_tf1_graph",
    "alltoall_without_splits_returns_the_tensor_only", "grouped_allgather_and_reducescatter",
    "a_collective_one_rank_refuses_fails_on_every_rank",
    "a_retry_of_a_failed_name_runs_on_every_rank", "tf1_distributed_optimizer_in_a_session",
    "horovod_return_values", "local_layers_stay_local", "tf1_hook_and_best_model_checkpoint",
    "timeline", "sparse_gradients_in_every_mode",
    "sparse_average_of_integer_values_and_indices",
    "large_tensors_in_parts_late_peers_and_async_eager",
    "join_then_broadcast_raises_on_the_ranks_that_did_not_join", "join",
]

_runs = {}


@pytest.fixture(params=[2, 3], ids=["np2", "np3"])
def tf_run(request, launch):
    n = request.param
    if n not in _runs:
        _runs[n] = launch(n, worker("tf_worker.py"), timeout=300)
    return _runs[n]


@pytest.mark.parametrize("name", CHECKS)
def test_tensorflow_collective(tf_run, name):
    tf_run.check(name)


def test_every_worker_check_is_listed(tf_run):
    unlisted = tf_run.reported() - set(CHECKS)
    assert not unlisted, f"checks the worker ran but CHECKS does not list: {sorted(unlisted)}"


def test_every_rank_exits_cleanly(tf_run):
    assert tf_run.returncode == 0, tf_run.output[-3000:]


def test_kolo_and_tensorflow_import_in_either_order(tmp_path):
    import subprocess
    import sys

    for first, second in (("kolo", "tensorflow"), ("tensorflow", "kolo")):
        code = (f"import {first}, {second}, kolo.tensorflow, numpy as np\n"
                "kolo.init()\n"
                "print(float(kolo.tensorflow.allreduce(np.ones([2], np.float32))[0]))\n")
        env = dict(os.environ, KOLO_SOCKET=str(tmp_path / "kolod.sock"),
                   TF_CPP_MIN_LOG_LEVEL="2")
        kolod = os.path.join(REPO, "bazel-bin", "daemon", "kolod")
        if not os.path.exists(kolod):
            pytest.skip("kolod not built")
        daemon = subprocess.Popen([kolod, "--socket", str(tmp_path / "kolod.sock")],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            out = subprocess.run([sys.executable, "-c", code], env=env, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        finally:
            daemon.terminate()
            daemon.wait(timeout=30)
        assert out.returncode == 0 and out.stdout.strip().endswith("1.0"), \
            f"{first} then {second}:\n{out.stdout[-2000:]}"


DATA = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"


@pytest.mark.skipif(not os.path.exists(DATA), reason="dataset-fashion-mnist not installed")
def test_keras_mnist_example(launch):
    run = launch(2, os.path.join(REPO, "examples", "keras_mnist.py"),
                 args=["--epochs", "2", "--samples", "4096"], timeout=300)
    assert run.returncode == 0, run.output[-3000:]
    lines = re.findall(r"rank (\d)/2: weights sha256 (\w+) train accuracy ([\d.]+) "
                       r"test accuracy ([\d.]+)", run.output)
    assert len(lines) == 2, run.output[-3000:]
    assert lines[0][1] == lines[1][1], f"weights differ across ranks: {lines}"
    assert float(lines[0][3]) > 0.5, f"test accuracy too low: {lines}"
