"""Fixtures for Kolo's Python tests: launching N ranks of a worker script
through kolorun (each run starts a private kolod on a fresh /tmp socket) and
collecting what each rank reported.

A worker runs a list of named checks in the same order on every rank and
writes {check: "ok" | error text} per rank as JSON (workers/harness.py); the
tests then assert one check each, so a few launches cover many cases.
"""

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
WORKERS = os.path.join(os.path.dirname(__file__), "workers")


def _bazel_bin(*parts):
    return os.path.join(REPO, "bazel-bin", *parts)


def kolorun_path():
    path = os.environ.get("KOLO_KOLORUN") or _bazel_bin("client", "kolorun", "kolorun")
    if not os.path.exists(path):
        pytest.skip(f"kolorun not built ({path}); run scripts/install_python.sh")
    return path


def kolod_path():
    return os.environ.get("KOLO_KOLOD") or _bazel_bin("daemon", "kolod")


class RankRun:
    """The outcome of one kolorun launch."""

    def __init__(self, returncode, output, results):
        self.returncode = returncode
        self.output = output
        self.results = results  # rank -> {check: "ok" | error}

    def reported(self):
        """Every check name some rank reported."""
        return set().union(*(r.keys() for r in self.results.values()))

    def check(self, name):
        """Fails the calling test unless every rank reported `name` as ok."""
        problems = []
        for rank in sorted(self.results):
            status = self.results[rank].get(name)
            if status != "ok":
                problems.append(f"rank {rank}: {status or 'not reached'}")
        if not self.results:
            problems.append("no rank reported")
        if problems:
            tail = self.output[-4000:]
            pytest.fail(f"{name}: " + "; ".join(problems) + f"\n--- output tail ---\n{tail}")


def kolorun_job(np_, script, args=(), kolorun_args=(), timeout=300, env=None, setup=None,
                collect=None):
    """Runs `script` (a path) on np_ ranks under `kolorun -np np_ KOLORUN_ARGS`
    with a private kolod; the workers write under $KOLO_TEST_OUT, a fresh
    folder that `setup(folder)` may prepare (returning more kolorun
    arguments) and `collect(folder)` reads before it is removed. Returns
    (exit status, output, what collect returned, seconds)."""
    tmp = tempfile.mkdtemp(prefix="kolo-pytest-")
    try:
        full_env = dict(os.environ)
        full_env.update(env or {})
        full_env["KOLO_TEST_OUT"] = tmp
        full_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        full_env.setdefault("PYTHONUNBUFFERED", "1")
        extra = list(setup(tmp)) if setup else []
        cmd = [kolorun_path(), "-np", str(np_), "--socket", os.path.join(tmp, "kolod.sock"),
               *kolorun_args, *extra]
        if os.path.exists(kolod_path()):
            cmd += ["--kolod", kolod_path()]
        cmd += ["--", sys.executable, script, *args]
        start = time.monotonic()
        try:
            proc = subprocess.run(cmd, env=full_env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, timeout=timeout, text=True,
                                  errors="replace")
            code, output = proc.returncode, proc.stdout
        except subprocess.TimeoutExpired as e:
            out = e.stdout or ""
            code, output = -1, (out if isinstance(out, str) else out.decode(errors="replace")) \
                + f"\n[timed out after {timeout} s]"
        seconds = time.monotonic() - start
        return code, output, collect(tmp) if collect else None, seconds
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def rank_records(folder):
    """rank -> the JSON each rank wrote to rank<N>.json in `folder`."""
    results = {}
    for name in os.listdir(folder):
        if re.fullmatch(r"rank\d+\.json", name):
            with open(os.path.join(folder, name)) as f:
                results[int(name[4:-5])] = json.load(f)
    return results


def run_ranks(np_, script, args=(), timeout=300, env=None):
    """Runs `script` (a path) on np_ ranks under kolorun with a private kolod;
    returns a RankRun. Workers write their results under $KOLO_TEST_OUT."""
    code, output, results, _ = kolorun_job(np_, script, args, timeout=timeout, env=env,
                                           collect=rank_records)
    return RankRun(code, output, results)


def fashion_mnist_file(name):
    """A file of the Fashion-MNIST dataset (KOLO_FASHION_MNIST, or where the
    Debian package puts it)."""
    return os.path.join(os.environ.get("KOLO_FASHION_MNIST", "/usr/share/datasets/fashion-mnist"),
                        name)


@pytest.fixture(scope="session")
def launch():
    return run_ranks


def worker(name):
    return os.path.join(WORKERS, name)


def peer_address(koloctl, socket):
    out = subprocess.run([koloctl, "--socket", socket, "--json", "status"], text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
    assert out.returncode == 0, out.stdout
    return json.loads(out.stdout)["node"]["config"]["peer_address"]


@contextlib.contextmanager
def two_nodes(tmp_path):
    """Two kolods on this machine joined by the Peer plane, standing for two
    nodes; yields (their sockets, node 0's peer address)."""
    kolod = os.path.join(REPO, "bazel-bin", "daemon", "kolod")
    koloctl = os.path.join(REPO, "bazel-bin", "koloctl", "koloctl")
    if not (os.path.exists(kolod) and os.path.exists(koloctl)):
        pytest.skip("kolod or koloctl not built")
    sockets = [str(tmp_path / f"node{n}.sock") for n in (0, 1)]
    daemons = [subprocess.Popen([kolod, "--socket", s, "--peer_address=127.0.0.1:0",
                                 "--peer_plaintext", "--status_address=127.0.0.1:0",
                                 f"--node_name=node{n}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
               for n, s in enumerate(sockets)]
    try:
        for s in sockets:
            deadline = time.monotonic() + 30
            while not os.path.exists(s) and time.monotonic() < deadline:
                time.sleep(0.05)
        yield sockets, peer_address(koloctl, sockets[0])
    finally:
        for d in daemons:
            d.terminate()
            d.wait(timeout=30)


def rank_env(sockets, coordinator, job_id, rank, size):
    """The environment of `rank` of a job of `size` ranks, half on each node."""
    per_node = size // 2
    return dict(os.environ, KOLO_SOCKET=sockets[rank // per_node], KOLO_JOB_ID=job_id,
                KOLO_JOB_TOKEN="0123456789abcdef0123456789abcdef", KOLO_RANK=str(rank),
                KOLO_SIZE=str(size), KOLO_LOCAL_RANK=str(rank % per_node),
                KOLO_LOCAL_SIZE=str(per_node), KOLO_COORDINATOR=coordinator)


@contextlib.contextmanager
def ray_cluster(head_cpus, *node_cpus):
    """A Ray cluster of this machine's processes (ray.cluster_utils): a head
    with `head_cpus` and one more node per `node_cpus`, whose workers import
    kolo from this checkout; yields the cluster with `.nodes` (the added
    ones), and shuts Ray down after."""
    from ray.cluster_utils import Cluster
    import ray
    if not os.path.exists(kolod_path()):
        pytest.skip("kolod not built")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(REPO, "python")] + [p for p in os.environ.get("PYTHONPATH", "").split(
            os.pathsep) if p])
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": head_cpus})
    c.nodes = [c.add_node(num_cpus=n) for n in node_cpus]
    ray.init(address=c.address, log_to_driver=False)
    c.wait_for_nodes()
    try:
        yield c
    finally:
        ray.shutdown()
        c.shutdown()
