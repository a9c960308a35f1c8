"""kolo.torch on 2 and 3 ranks (one launch per rank count): every collective
against a one-process computation, their gradients, every dtype, errors
raised on every rank, process sets, DistributedOptimizer, parameter and
optimizer-state broadcast and SyncBatchNorm."""

import json
import os
import subprocess
import sys
import time

import pytest

from conftest import REPO, WORKERS, rank_env, two_nodes, worker

pytest.importorskip("torch")
sys.path.insert(0, WORKERS)
from trace_check import read_trace  # noqa: E402

CHECKS = [
    "topology", "allreduce_every_dtype_and_op", "uint16_allreduce_broadcast_allgather",
    "allreduce_average_is_default_and_average_flag",
    "allreduce_in_place_async_and_handles", "allreduce_scale_factors_and_scalar",
    "allreduce_compression", "grouped_allreduce_forms", "broadcast_forms_every_dtype",
    "allgather_every_dtype_and_ragged", "reducescatter_sum_average_uneven_and_grouped",
    "alltoall_even_and_with_splits", "barrier_and_objects", "gradient_of_allreduce",
    "gradient_of_allgather_and_broadcast", "gradient_of_alltoall_and_reducescatter",
    "mismatched_shapes_raise_on_every_rank", "mismatched_dtypes_raise_on_every_rank",
    "unsupported_input_is_refused_locally",
    "duplicate_in_flight_name_raises_on_the_submitting_rank",
    "failed_collective_leaves_the_job_usable", "built_flags_follow_horovods_types",
    "sparse_allreduce_async_handle_is_callable_and_synchronizable",
    "horovod_names_and_compressors", "process_sets",
    "distributed_optimizer_matches_one_process",
    "distributed_optimizer_adam_backward_passes_and_predivide",
    "distributed_optimizer_compression_groups_and_sum",
    "distributed_optimizer_synchronize_skip_and_zero_grad_rule",
    "distributed_optimizer_sparse_gradients", "broadcast_parameters_and_optimizer_state",
    "broadcast_state_options_and_objects_as_horovods_tests",
    "distributed_optimizer_without_names_and_unused_parameters",
    "sync_batch_norm_matches_one_process", "timeline_restarts_at_a_new_path",
    "join_then_broadcast_raises_on_the_ranks_that_did_not_join", "join_last",
    "shutdown_then_init_forms_the_job_again",
    "a_rank_shutting_down_mid_collective_fails_the_others_then_all_init_again",
]

_runs = {}


@pytest.fixture(params=[2, 3], ids=["np2", "np3"])
def torch_run(request, launch):
    n = request.param
    if n not in _runs:
        _runs[n] = launch(n, worker("torch_worker.py"), timeout=300)
    return _runs[n]


@pytest.mark.parametrize("name", CHECKS)
def test_torch_collective(torch_run, name):
    torch_run.check(name)


def test_every_worker_check_is_listed(torch_run):
    unlisted = torch_run.reported() - set(CHECKS)
    assert not unlisted, f"checks the worker ran but CHECKS does not list: {sorted(unlisted)}"


def test_every_rank_exits_cleanly(torch_run):
    assert torch_run.returncode == 0, torch_run.output[-3000:]


@pytest.mark.parametrize("ending", ["shutdown", "exit"])
def test_kolo_timeline_records_the_run_into_its_file(launch, tmp_path, ending):
    """KOLO_TIMELINE=<path>: init() starts the job's timeline and shutdown()
    (or, without one, interpreter exit) writes it to <path>."""
    path = str(tmp_path / "run.json")
    run = launch(2, worker("timeline_worker.py"), args=[f"env-{ending}"],
                 env={"KOLO_TIMELINE": path}, timeout=180)
    assert run.returncode == 0, run.output[-3000:]
    trace = read_trace(path)
    assert sorted(trace.names_by_tid) == [0, 1], sorted(trace.names_by_tid)
    trace.expect_tensors([f"timeline.{i}" for i in range(3)], [0, 1])


def _finish(ranks):
    outputs = [p.communicate(timeout=180)[0] for p in ranks]
    for r, p in enumerate(ranks):
        assert p.returncode == 0, f"rank {r}:\n{outputs[r][-3000:]}"
    return outputs


def test_timeline_of_a_job_on_two_nodes_is_one_file_per_node(tmp_path):
    """Two kolods on this machine stand for two nodes of 2 ranks each: rank 0
    writes the path, rank 2 (the first of node 1) path.node1, each with the
    rows of its node's ranks."""
    ranks = []
    with two_nodes(tmp_path) as (sockets, coordinator):
        try:
            path = str(tmp_path / "trace.json")
            for r in range(4):
                ranks.append(subprocess.Popen(
                    [sys.executable, worker("timeline_worker.py"), "explicit", path],
                    env=rank_env(sockets, coordinator, "two-nodes", r, 4),
                    text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
            _finish(ranks)
        finally:
            for p in ranks:
                if p.poll() is None:
                    p.kill()
    for file, rows in ((path, [0, 1]), (path + ".node1", [2, 3])):
        trace = read_trace(file)
        assert sorted(trace.names_by_tid) == rows, (file, sorted(trace.names_by_tid))
        trace.expect_tensors([f"timeline.{i}" for i in range(3)], rows)
    written = sorted(n for n in os.listdir(tmp_path) if n.startswith("trace.json"))
    assert written == ["trace.json", "trace.json.node1"], written


_REINIT = """
import sys, time, torch, kolo.torch as hvd
late = int(sys.argv[1])  # the rank that reaches each shutdown last
hvd.init()
R, N = hvd.rank(), hvd.size()
for cycle in range(3):
    out = hvd.allreduce(torch.full([3], float(R + 1)), op=hvd.Sum, name="reinit")
    assert out.tolist() == [N * (N + 1) / 2] * 3, (cycle, out)
    if R == late:
        time.sleep(0.5)
    hvd.shutdown()
    assert not hvd.is_initialized()
    hvd.init()
    assert hvd.is_initialized() and (hvd.rank(), hvd.size()) == (R, N)
out = hvd.allreduce(torch.full([3], float(R + 1)), op=hvd.Sum, name="reinit")
assert out.tolist() == [N * (N + 1) / 2] * 3, out
print("reinit ok")
"""


@pytest.mark.parametrize("late", [0, 1], ids=["coordinator_node_late", "member_node_late"])
def test_shutdown_then_init_forms_a_job_on_two_nodes_again(tmp_path, late):
    """shutdown() then init() on a job of one rank on each of two kolods: the
    rank that attaches again first (on the coordinator's node or the
    member's) starts the next incarnation, the other joins it."""
    ranks = []
    with two_nodes(tmp_path) as (sockets, coordinator):
        try:
            for r in range(2):
                ranks.append(subprocess.Popen(
                    [sys.executable, "-c", _REINIT, str(late)],
                    env=rank_env(sockets, coordinator, f"reinit-{late}", r, 2),
                    text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
            for out in _finish(ranks):
                assert "reinit ok" in out, out[-2000:]
        finally:
            for p in ranks:
                if p.poll() is None:
                    p.kill()


def test_one_rank_without_kolorun_and_imports_in_either_order(tmp_path):
    """kolo.torch beside TensorFlow and torch in any import order, on a job of
    one rank (a kolod of its own, no kolorun); a tensor in the session's
    arena stays usable after shutdown."""
    kolod = os.path.join(REPO, "bazel-bin", "daemon", "kolod")
    if not os.path.exists(kolod):
        pytest.skip("kolod not built")
    sock = str(tmp_path / "kolod.sock")
    daemon = subprocess.Popen([kolod, "--socket", sock], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        for order in (("kolo.torch", "torch"), ("torch", "kolo.torch"),
                      ("tensorflow", "kolo.torch"), ("kolo.torch", "tensorflow")):
            code = "".join(f"import {m}\n" for m in order) + (
                "import torch, kolo.torch as hvd\n"
                "hvd.init()\n"
                "assert hvd.size() == 1 and hvd.rank() == 0\n"
                "from kolo.torch import mpi_ops\n"
                "arena = mpi_ops._arena_tensor([3], torch.float32)\n"
                "arena.fill_(2.0)\n"
                "hvd.allreduce_(arena, op=hvd.Sum)\n"
                "hvd.shutdown()\n"
                "arena += 1.0  # still mapped after the client is gone\n"
                "assert arena.tolist() == [3.0, 3.0, 3.0], arena\n"
                "hvd.init()\n"
                "print(float(hvd.allreduce(torch.ones(2))[0]))\n")
            env = dict(os.environ, KOLO_SOCKET=sock, TF_CPP_MIN_LOG_LEVEL="2")
            out = subprocess.run([sys.executable, "-c", code], env=env, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
            assert out.returncode == 0 and out.stdout.strip().endswith("1.0"), \
                f"{order}:\n{out.stdout[-2000:]}"
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
