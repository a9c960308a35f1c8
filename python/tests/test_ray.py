"""kolo.ray.RayExecutor on a real Ray cluster on this machine: a head and one
more node (ray.cluster_utils.Cluster), each given its own kolod by the
executor (the nodes share one address, so the kolods' Peer plane runs on
loopback in plaintext)."""

import json
import os
import subprocess
import sys
import time

import pytest

from conftest import REPO, fashion_mnist_file, ray_cluster

ray = pytest.importorskip("ray")
pytest.importorskip("torch")

from kolo.ray import RayExecutor  # noqa: E402

# The workers cannot import this test module: its functions travel by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def cluster():
    # Two nodes of 2 CPUs, each with its kolod once an executor starts.
    with ray_cluster(2, 2) as c:
        yield c


def allreduce():
    import torch
    import kolo.torch as hvd
    hvd.init()
    out = hvd.allreduce(torch.full((4,), float(hvd.rank() + 1)), op=hvd.Sum, name="x")
    return hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size(), out.tolist()


def train():
    import torch
    import kolo.torch as hvd
    hvd.init()
    torch.manual_seed(hvd.rank())
    model = torch.nn.Linear(8, 2)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    gen = torch.Generator().manual_seed(100 + hvd.rank())
    for _ in range(3):
        x = torch.randn(16, 8, generator=gen)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), x[:, :2]).backward()
        opt.step()
    return float(sum(p.double().sum() for p in model.parameters()))


class Counter:
    def __init__(self, start):
        self.value = start

    def bump(self):
        import kolo
        self.value += 1
        return self.value, int(os.environ["KOLO_RANK"])


def _alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def test_executor_two_hosts(cluster):
    ex = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_hosts=2,
                     num_workers_per_host=1)
    ex.start(executable_cls=Counter, executable_args=[10], extra_env_vars={"KOLO_TEST_X": "7"})
    job = ex.job_id
    try:
        ranks = ex.run(allreduce)
        assert [r[:4] for r in ranks] == [(0, 2, 0, 1), (1, 2, 0, 1)]
        assert all(r[4] == [3.0] * 4 for r in ranks)
        envs = ex.run(lambda: (os.environ["KOLO_JOB_ID"], os.environ["KOLO_TEST_X"],
                               os.environ["KOLO_SOCKET"], "KOLO_COORDINATOR" in os.environ,
                               os.getpid()))
        assert all(e[0] == job and e[1] == "7" and e[3] for e in envs)
        assert envs[0][2] != envs[1][2] and job in envs[0][2]
        sums = ex.run(train)
        assert sums[0] == sums[1]
        assert ex.execute(lambda c: c.bump()) == [(11, 0), (11, 1)]
        assert ex.execute_single(lambda c: c.bump()) == (12, 0)
        refs = ex.run_remote(lambda a, b=0: a + b + int(os.environ["KOLO_RANK"]), [1], {"b": 2})
        assert ray.get(refs) == [3, 4]
        pids = [e[4] for e in envs]
        kolods = subprocess.run(["pgrep", "-f", job], stdout=subprocess.PIPE, text=True).stdout
        assert len(kolods.split()) == 2
    finally:
        ex.shutdown()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (
            any(_alive(p) for p in pids) or
            subprocess.run(["pgrep", "-f", job], stdout=subprocess.PIPE).returncode == 0):
        time.sleep(0.2)
    assert not any(_alive(p) for p in pids)
    assert subprocess.run(["pgrep", "-af", job], stdout=subprocess.PIPE,
                          text=True).stdout == ""


def test_executor_num_workers(cluster):
    ex = RayExecutor(num_workers=2)
    ex.start()
    try:
        ranks = ex.run(allreduce)
        assert [r[1] for r in ranks] == [2, 2] and all(r[4] == [3.0] * 4 for r in ranks)
        assert sorted(r[0] for r in ranks) == [0, 1]
    finally:
        ex.shutdown()


def train_loop(config):
    import json
    import kolo.torch as hvd
    checksum = train()
    # Ray Train V2 keeps no metrics without a checkpoint: each rank writes its own.
    with open(os.path.join(config["out"], f"rank{hvd.rank()}.json"), "w") as f:
        json.dump([checksum, hvd.size(), os.environ["KOLO_JOB_ID"]], f)


def test_ray_train_backend(cluster, tmp_path):
    pytest.importorskip("pyarrow")
    from ray.train import RunConfig, ScalingConfig
    # Ray Train V2 (the default; ray.train.data_parallel_trainer's V1 trainer
    # refuses to run under it).
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer
    from kolo.ray import KoloConfig

    trainer = DataParallelTrainer(train_loop, train_loop_config={"out": str(tmp_path)},
                                  backend_config=KoloConfig(timeout_s=60),
                                  scaling_config=ScalingConfig(num_workers=2),
                                  run_config=RunConfig(storage_path=str(tmp_path)))
    trainer.fit()
    ranks = [json.load(open(tmp_path / f"rank{r}.json")) for r in (0, 1)]
    assert ranks[0] == ranks[1] and ranks[0][1] == 2
    job = ranks[0][2]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and subprocess.run(
            ["pgrep", "-f", job], stdout=subprocess.PIPE).returncode == 0:
        time.sleep(0.2)
    assert subprocess.run(["pgrep", "-af", job], stdout=subprocess.PIPE,
                          text=True).stdout == ""


def run_example(script, argv):
    """What a user does to run an example program's training under
    RayExecutor: the script itself, run in the worker as its __main__ (the
    executor has set the worker's KOLO_* environment, so its hvd.init()
    joins the job) with its command line in sys.argv. Returns the rank, the
    size, the checksum the example reported and one computed here from the
    model it trained."""
    import hashlib
    import runpy
    import numpy as np
    here = os.path.dirname(script)
    sys.path.insert(0, here)  # as `python script`: its fashion_mnist_idx import
    saved, sys.argv = sys.argv, [script, *argv]
    try:
        done = runpy.run_path(script, run_name="__main__")
    finally:
        sys.argv = saved
        sys.path.remove(here)
    model = done["model"]
    if hasattr(model, "state_dict"):  # PyTorch
        weights = [t.detach().cpu().numpy() for t in model.state_dict().values()]
    else:  # Keras
        weights = [v.numpy() for v in model.variables]
    mine = hashlib.sha256()
    for w in weights:
        mine.update(np.ascontiguousarray(w).tobytes())
    return (done["rank"], done["size"], done["digest"].hexdigest(), mine.hexdigest(),
            float(done["test_acc"]))


def run_example_on_two_hosts(name, argv, workers_per_host):
    data = fashion_mnist_file("train-images-idx3-ubyte.gz")
    if not os.path.exists(data):
        pytest.skip("dataset-fashion-mnist not installed")
    argv = [*argv, "--data-dir", os.path.dirname(data)]
    ex = RayExecutor(RayExecutor.create_settings(timeout_s=120), num_hosts=2,
                     num_workers_per_host=workers_per_host)
    ex.start(extra_env_vars={"OMP_NUM_THREADS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"})
    try:
        ranks = ex.run(run_example, args=[os.path.join(REPO, "examples", name), argv])
    finally:
        ex.shutdown()
    size = 2 * workers_per_host
    assert [r[:2] for r in ranks] == [(r, size) for r in range(size)]
    # Every worker ends with the same weights, and the example's own report
    # agrees with them.
    assert len({r[2] for r in ranks}) == 1 and len({r[3] for r in ranks}) == 1, ranks
    assert all(r[2] == r[3] for r in ranks), ranks
    assert ranks[0][4] > 0.5, f"test accuracy too low: {ranks}"


@pytest.mark.parametrize("workers_per_host", [1, 2])
def test_torch_mnist_example_on_two_hosts(cluster, workers_per_host):
    run_example_on_two_hosts("torch_mnist.py", ["--epochs", "1", "--samples", "4096"],
                             workers_per_host)


@pytest.mark.parametrize("workers_per_host", [1, 2])
def test_keras_mnist_example_on_two_hosts(cluster, workers_per_host):
    pytest.importorskip("tensorflow")
    run_example_on_two_hosts("keras_mnist.py", ["--epochs", "1", "--samples", "4096"],
                             workers_per_host)


def test_plaintext_only_on_one_machine():
    from kolo.ray._job import _one_machine
    assert _one_machine(["127.0.0.1", "127.0.0.2", "::1"])
    assert _one_machine(["192.0.2.2", "192.0.2.2"])
    assert not _one_machine(["192.0.2.2", "192.0.2.3"])
    assert not _one_machine(["127.0.0.1", "192.0.2.3"])
