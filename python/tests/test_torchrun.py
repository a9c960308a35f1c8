"""Ranks started by torchrun (not kolorun) attach to Kolo: libkolo reads
torchrun's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE and
TORCHELASTIC_RUN_ID, and the ranks without KOLO_JOB_TOKEN share the user's
token file. One node (--standalone) against a kolod the test starts, or
with none, where local rank 0 starts a private kolod that exits after the job;
and two
"nodes" (two torchrun invocations, --nnodes 2, a rendezvous on loopback) over
two kolods joined by the Peer plane."""

import os
import re
import stat
import subprocess
import sys
import time

import pytest

from conftest import REPO, fashion_mnist_file, kolod_path, two_nodes, worker

pytest.importorskip("torch")

TORCHRUN = os.path.join(os.path.dirname(sys.executable), "torchrun")
if not os.path.exists(TORCHRUN):
    pytest.skip("torchrun is not installed beside this Python", allow_module_level=True)


def torchrun_env(tmp_path, socket, **extra):
    """The environment of a torchrun agent; no KOLO_SOCKET when `socket` is
    None."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KOLO_")}
    if socket is not None:
        env["KOLO_SOCKET"] = socket
    env.update(KOLO_JOB_TOKEN_FILE=str(tmp_path / "job_token"),
               PYTHONPATH=os.path.join(REPO, "python"), PYTHONUNBUFFERED="1",
               OMP_NUM_THREADS="1")
    env.update(extra)
    return env


def run(cmd, env, timeout=240):
    try:
        proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, errors="replace", timeout=timeout)
        return proc.returncode, proc.stdout
    except subprocess.TimeoutExpired as e:
        out = e.stdout or ""
        out = out if isinstance(out, str) else out.decode(errors="replace")
        return -1, out + f"\n[timed out after {timeout} s]"


@pytest.fixture
def kolod(tmp_path):
    """A kolod on a fresh socket; yields the socket's path."""
    if not os.path.exists(kolod_path()):
        pytest.skip("kolod not built")
    socket = str(tmp_path / "kolod.sock")
    daemon = subprocess.Popen([kolod_path(), "--socket", socket, "--status_address=127.0.0.1:0"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not os.path.exists(socket) and time.monotonic() < deadline:
            time.sleep(0.05)
        yield socket
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)


def test_standalone_two_ranks_train_in_step(kolod, tmp_path):
    code, out = run([TORCHRUN, "--nproc-per-node", "2", "--standalone",
                     worker("torchrun_worker.py")], torchrun_env(tmp_path, kolod))
    assert code == 0, out[-4000:]
    assert sorted(re.findall(r"torchrun rank (\d)/2 ok", out)) == ["0", "1"], out[-4000:]
    # Without KOLO_JOB_TOKEN the ranks shared the user's token file, private
    # to the user.
    mode = os.stat(tmp_path / "job_token").st_mode
    assert stat.S_IMODE(mode) == 0o600
    assert len((tmp_path / "job_token").read_text().strip()) == 32


def test_standalone_without_a_kolod_starts_a_private_one(tmp_path):
    if not os.path.exists(kolod_path()):
        pytest.skip("kolod not built")
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    # No kolod on the node's socket: the default one, which no kolod serves
    # in a test (a node with a system kolod would serve the job instead).
    env = torchrun_env(tmp_path, None, KOLO_KOLOD=kolod_path(), XDG_RUNTIME_DIR=str(runtime))
    code, out = run([TORCHRUN, "--nproc-per-node", "2", "--standalone",
                     worker("torchrun_worker.py")], env)
    assert code == 0, out[-4000:]
    assert sorted(re.findall(r"torchrun rank (\d)/2 ok", out)) == ["0", "1"], out[-4000:]
    private = runtime / "kolo"
    assert stat.S_IMODE(os.stat(private).st_mode) == 0o700
    logs = list(private.glob("*.sock.log"))
    assert len(logs) == 1, list(private.iterdir())
    # The private kolod exits once the job's ranks are gone (its socket
    # goes with it).
    sock = str(logs[0])[:-len(".log")]
    deadline = time.monotonic() + 30
    while os.path.exists(sock) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not os.path.exists(sock), "the private kolod is still running:\n" + \
        logs[0].read_text()[-2000:]


@pytest.mark.skipif(not os.path.exists(fashion_mnist_file("train-images-idx3-ubyte.gz")),
                    reason="dataset-fashion-mnist not installed")
def test_torch_mnist_example_under_torchrun(kolod, tmp_path):
    code, out = run([TORCHRUN, "--nproc-per-node", "2", "--standalone",
                     os.path.join(REPO, "examples", "torch_mnist.py"),
                     "--epochs", "1", "--samples", "2048"], torchrun_env(tmp_path, kolod))
    assert code == 0, out[-4000:]
    lines = re.findall(r"rank (\d)/2: weights sha256 (\w+)", out)
    assert sorted(r for r, _ in lines) == ["0", "1"], out[-4000:]
    assert lines[0][1] == lines[1][1], f"weights differ across ranks: {lines}"


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("derived", [False, True], ids=["KOLO_COORDINATOR", "derived"])
def test_two_nodes(tmp_path, derived):
    """Two torchrun agents, one per "node", each over its own kolod; the
    coordinator is given, or derived from MASTER_ADDR and KOLO_PEER_PORT."""
    with two_nodes(tmp_path) as (sockets, coordinator):
        rdzv = f"127.0.0.1:{free_port()}"
        procs = []
        for node in (0, 1):
            extra = ({"KOLO_PEER_PORT": coordinator.rsplit(":", 1)[1]} if derived
                     else {"KOLO_COORDINATOR": coordinator})
            cmd = [TORCHRUN, "--nnodes", "2", "--node-rank", str(node), "--nproc-per-node", "2",
                   "--rdzv-backend", "c10d", "--rdzv-endpoint", rdzv, "--rdzv-id", "kolo-two",
                   "--local-addr", "127.0.0.1", worker("torchrun_worker.py")]
            procs.append(subprocess.Popen(cmd, env=torchrun_env(tmp_path, sockets[node], **extra),
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          text=True, errors="replace"))
        outs = []
        for p in procs:
            try:
                outs.append(p.communicate(timeout=240)[0])
            except subprocess.TimeoutExpired:
                p.kill()
                outs.append(p.communicate()[0] + "\n[timed out]")
        out = "\n".join(outs)
        assert all(p.returncode == 0 for p in procs), out[-6000:]
        assert sorted(re.findall(r"torchrun rank (\d)/4 ok", out)) == ["0", "1", "2", "3"], \
            out[-6000:]
