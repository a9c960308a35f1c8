"""deploy/kubernetes/training/*.yaml: the pods of each training manifest,
started with exactly the environment the kubelet (and, for the PyTorchJob,
Kubeflow's training operator) would give them, against two local kolods
that stand for the nodes' DaemonSet kolods, one pod per node as the
manifests' anti-affinity places them. What stands in for the cluster, and
only that, is printed:
  - the socket hostPath /run/kolo/kolod.sock is node N's kolod's socket;
  - the names that resolve to rank 0's node (the Indexed Job's
    <job>-0.<service>, the PyTorchJob's <job>-master-0) are 127.0.0.1, and
    the kolods' Peer port 7371 is node 0's kolod's port (KOLO_PEER_PORT for
    the port libkolo derives);
  - a Secret's value is a fresh token; workingDir is this checkout; `python`
    is this interpreter.
Every pod must exit 0 and report the same weights."""

import os
import re
import subprocess
import sys

import pytest

from conftest import REPO, two_nodes

yaml = pytest.importorskip("yaml")
pytest.importorskip("torch")

TRAINING = os.path.join(REPO, "deploy", "kubernetes", "training")
TOKEN = os.urandom(16).hex()
# The variables a launcher or the cluster sets: none may leak in from here.
_LAUNCHER_VARS = re.compile(r"^(KOLO_|OMPI_|SLURM_|TORCHELASTIC_|RANK$|WORLD_SIZE$|LOCAL_RANK$|"
                            r"LOCAL_WORLD_SIZE$|GROUP_RANK$|MASTER_ADDR$|MASTER_PORT$)")


def _docs(name):
    with open(os.path.join(TRAINING, name)) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def _container_env(container, index):
    """The container's env as the kubelet resolves it for the pod of
    completion index `index`."""
    env = {}
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = str(e["value"])
            continue
        source = e["valueFrom"]
        if "fieldRef" in source:
            path = source["fieldRef"]["fieldPath"]
            assert path == "metadata.annotations['batch.kubernetes.io/job-completion-index']", path
            env[e["name"]] = str(index)
        elif "secretKeyRef" in source:
            env[e["name"]] = TOKEN
        else:
            raise AssertionError(f"env {e['name']}: a source this test does not know: {source}")
    return env


def _pods_of_indexed_job():
    service, job = _docs("indexed-job.yaml")
    assert service["kind"] == "Service" and service["spec"]["clusterIP"] == "None"
    assert job["spec"]["completionMode"] == "Indexed"
    spec = job["spec"]["template"]["spec"]
    assert spec["subdomain"] == service["metadata"]["name"] and spec["hostNetwork"]
    rank0 = f"{job['metadata']['name']}-0.{service['metadata']['name']}"
    return [(spec, _container_env(spec["containers"][0], i), rank0)
            for i in range(job["spec"]["completions"])]


def _pods_of_pytorchjob():
    (job,) = _docs("pytorchjob.yaml")
    name = job["metadata"]["name"]
    replicas = job["spec"]["pytorchReplicaSpecs"]
    roles = [("Master", replicas["Master"])] + [("Worker", replicas["Worker"])]
    world = sum(r["replicas"] for _, r in roles)
    pods, rank = [], 0
    for role, replica in roles:
        spec = replica["template"]["spec"]
        container = next(c for c in spec["containers"] if c["name"] == "pytorch")
        port = next(p["containerPort"] for p in container["ports"]
                    if p["name"] == "pytorchjob-port")
        for _ in range(replica["replicas"]):
            env = _container_env(container, rank)
            # What the training operator adds to every replica's pod.
            env.update(MASTER_ADDR=f"{name}-master-0", MASTER_PORT=str(port),
                       WORLD_SIZE=str(world), RANK=str(rank), PYTHONUNBUFFERED="1")
            pods.append((spec, env, f"{name}-master-0"))
            rank += 1
    return pods


def _stand_in(env, rank0_name, socket, coordinator):
    """The pod's env with the cluster's names replaced by this machine's."""
    host, port = coordinator.rsplit(":", 1)
    out = {}
    for k, v in env.items():
        if k == "KOLO_SOCKET":
            assert v == "/run/kolo/kolod.sock", v
            v = socket
        v = v.replace(f"{rank0_name}:7371", f"{host}:{port}")
        if k == "MASTER_ADDR" and v == rank0_name:
            v = host
        out[k] = v
    if "MASTER_ADDR" in out:
        out["KOLO_PEER_PORT"] = port
    print(f"pod env (stand-ins applied): {sorted((k, v) for k, v in out.items() if k != 'KOLO_JOB_TOKEN')}")
    return out


@pytest.mark.parametrize("manifest", ["indexed-job", "pytorchjob"])
def test_the_manifests_pods_train_across_two_kolods(tmp_path, manifest):
    pods = _pods_of_indexed_job() if manifest == "indexed-job" else _pods_of_pytorchjob()
    assert len(pods) == 2
    base = {k: v for k, v in os.environ.items() if not _LAUNCHER_VARS.match(k)}
    procs = []
    with two_nodes(tmp_path) as (sockets, coordinator):
        try:
            for node, (spec, env, rank0_name) in enumerate(pods):
                container = spec["containers"][0]
                cmd = list(container["command"]) + list(container.get("args", []))
                assert cmd[0] == "python", cmd
                cmd[0] = sys.executable
                assert container["workingDir"] == "/opt/kolo"
                procs.append(subprocess.Popen(
                    cmd, cwd=REPO, env=dict(base, **_stand_in(env, rank0_name, sockets[node],
                                                             coordinator)),
                    text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
            outputs = [p.communicate(timeout=300)[0] for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
    sums = []
    for r, (p, out) in enumerate(zip(procs, outputs)):
        assert p.returncode == 0, f"pod {r}:\n{out[-3000:]}"
        m = re.search(r"rank (\d)/2: weights sha256 ([0-9a-f]+)", out)
        assert m and int(m.group(1)) == r, f"pod {r}:\n{out[-3000:]}"
        sums.append(m.group(2))
    assert sums[0] == sums[1], sums
