"""The kolo NumPy API on 2 and 3 ranks (one launch per rank count)."""

import numpy as np
import pytest

from conftest import worker

CHECKS = [
    "topology", "allreduce_ops", "allreduce_dtypes", "bool_reduces_logically",
    "allreduce_scale_factors", "allreduce_compression", "allreduce_async_handles",
    "allreduce_empty_and_scalar",
    "grouped_allreduce", "broadcast", "allgather", "grouped_allgather",
    "reducescatter", "grouped_reducescatter", "alltoall", "barrier", "process_sets",
    "mismatch_raises_failed_precondition", "unsupported_dtype_raises",
    "a_collective_one_rank_refuses_fails_on_every_rank",
    "in_place_allreduce", "cuda_arrays_take_the_device_path", "join",
]

_runs = {}


@pytest.fixture(params=[2, 3], ids=["np2", "np3"])
def numpy_run(request, launch):
    n = request.param
    if n not in _runs:
        _runs[n] = launch(n, worker("numpy_worker.py"), timeout=180)
    return _runs[n]


@pytest.mark.parametrize("name", CHECKS)
def test_numpy_collective(numpy_run, name):
    numpy_run.check(name)


def test_every_worker_check_is_listed(numpy_run):
    unlisted = numpy_run.reported() - set(CHECKS)
    assert not unlisted, f"checks the worker ran but CHECKS does not list: {sorted(unlisted)}"


def test_every_rank_exits_cleanly(numpy_run):
    assert numpy_run.returncode == 0, numpy_run.output[-3000:]


def test_calls_before_init_raise():
    import kolo

    kolo.shutdown()
    with pytest.raises(kolo.FailedPreconditionError, match="init"):
        kolo.rank()
    with pytest.raises(kolo.FailedPreconditionError):
        kolo.allreduce(np.ones([2]))


def test_init_without_daemon_raises_unavailable(monkeypatch, tmp_path):
    import kolo

    monkeypatch.setenv("KOLO_SOCKET", str(tmp_path / "none.sock"))
    monkeypatch.setenv("KOLO_RANK", "0")
    monkeypatch.setenv("KOLO_SIZE", "1")
    # Connect waits connect_timeout for the socket; keep the wait short.
    with pytest.raises(kolo.UnavailableError, match="none.sock"):
        kolo.init()
