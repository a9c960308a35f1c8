"""deploy/slurm/kolo.sbatch, run as Slurm would run it on a 2-node
allocation of 2 tasks per node, with `srun` and `scontrol` played by small
scripts: each node's task gets Slurm's variables (SLURM_PROCID, SLURM_NTASKS,
SLURM_LOCALID, SLURM_NODEID, SLURMD_NODENAME, SLURM_NTASKS_PER_NODE,
SLURM_JOB_ID, SLURM_STEP_ID), and the two "nodes" are this machine. The
script starts a kolod per node for the job (no system kolod answers), the
four ranks form one job across both, and no kolod is left afterwards."""

import os
import socket
import stat
import subprocess
import sys

import pytest

from conftest import REPO

SRUN = r"""#!/bin/bash
# srun as Slurm runs a step: every task of it, with the task's variables.
per_node=$SHIM_TASKS_PER_NODE
args=()
for a in "$@"; do
  case "$a" in
    --ntasks-per-node=*) per_node=${a#*=} ;;
    --overlap) ;;
    *) args+=("$a") ;;
  esac
done
step=$(cat "$SHIM_DIR/step" 2>/dev/null || echo 0)
echo $((step + 1)) >"$SHIM_DIR/step"
tasks=()
trap 'kill "${tasks[@]}" 2>/dev/null; wait' TERM INT
for node in $(seq 0 $((SHIM_NODES - 1))); do
  for local in $(seq 0 $((per_node - 1))); do
    SLURM_PROCID=$((node * per_node + local)) SLURM_NTASKS=$((SHIM_NODES * per_node)) \
      SLURM_LOCALID=$local SLURM_NODEID=$node SLURMD_NODENAME=node$node \
      SLURM_NTASKS_PER_NODE=$per_node SLURM_STEP_ID=$step "${args[@]}" &
    tasks+=($!)
  done
done
status=0
for t in "${tasks[@]}"; do wait "$t" || status=$?; done
exit $status
"""

SCONTROL = r"""#!/bin/bash
# scontrol show hostnames LIST: the allocation's nodes, all this machine.
[[ "$1 $2" == "show hostnames" ]] || exit 2
for _ in $(seq 1 "$SHIM_NODES"); do echo 127.0.0.1; done
"""

RANK = r"""
import os, numpy as np, kolo
kolo.init()
got = kolo.allreduce(np.full(3, float(kolo.rank() + 1)), op=kolo.Sum, name="slurm")
assert got.tolist() == [10.0] * 3, got
print(f"rank {kolo.rank()}/{kolo.size()} local {kolo.local_rank()}/{kolo.local_size()} "
      f"job {os.environ['SLURM_JOB_ID']}: allreduce ok", flush=True)
kolo.shutdown()
"""


def _free_port_pair():
    """A port whose next one is free too (the two nodes' Peer ports)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port + 1))
            return port
        except OSError:
            continue
    pytest.skip("no two consecutive free ports")


def _kolods_of(tag):
    out = subprocess.run(["pgrep", "-a", "kolod"], text=True, stdout=subprocess.PIPE).stdout
    return [l for l in out.splitlines() if tag in l]


def test_the_sbatch_script_runs_a_job_across_two_nodes(tmp_path):
    kolod = os.path.join(REPO, "bazel-bin", "daemon", "kolod")
    if not os.path.exists(kolod):
        pytest.skip("kolod not built")
    shims = tmp_path / "bin"
    shims.mkdir()
    for name, text in (("srun", SRUN), ("scontrol", SCONTROL)):
        (shims / name).write_text(text)
        (shims / name).chmod(stat.S_IRWXU)
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    job_id = f"77{os.getpid()}"
    env = dict(os.environ, PATH=f"{shims}:{os.environ['PATH']}", SHIM_DIR=str(tmp_path),
               SHIM_NODES="2", SHIM_TASKS_PER_NODE="2", SLURM_JOB_ID=job_id,
               SLURM_JOB_NODELIST="node[0-1]", KOLOD=kolod, KOLOD_ARGS="--peer_plaintext",
               KOLO_PEER_PORT=str(_free_port_pair()), KOLO_NODE_ADDRESS="127.0.0.1",
               KOLO_SOCKET=str(tmp_path / "no-system-kolod.sock"),
               PYTHONPATH=os.path.join(REPO, "python"))
    env.pop("KOLO_JOB_TOKEN", None)
    proc = subprocess.run(["bash", os.path.join(REPO, "deploy", "slurm", "kolo.sbatch"),
                           sys.executable, str(script)], env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:]
    for r in range(4):
        assert f"rank {r}/4 local {r % 2}/2 job {job_id}: allreduce ok" in proc.stdout, \
            proc.stdout[-3000:]
    assert not _kolods_of(f"kolo-{job_id}."), _kolods_of(f"kolo-{job_id}.")
