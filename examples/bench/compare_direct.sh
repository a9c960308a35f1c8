#!/bin/bash
# compare_direct.sh: what direct rounds buy across daemons on this machine
# (each daemon a "node", mutual TLS, UCX over tcp on loopback). With them
# (kolod's default, --direct_ready), a name every node has cached is agreed
# between the nodes over the data plane; without them (--direct_ready=false)
# every collective makes a round trip to the coordinator first. Both run in
# one go, alternating --rounds times (which goes first alternates too), next
# to OpenMPI over TCP on the same loopback:
#   1. an 8-byte allreduce across 2 and 3 daemons (median of --iters calls);
#   2. mid sizes, 64 KiB to 1 MiB, across 2 daemons (median time per size);
#   3. ResNet-50's 161 gradients across 2 daemons (p50 step).
# Prints, per figure, the median over the rounds with and without direct
# rounds, their ratio, and Kolo against OpenMPI.
#
# usage: examples/bench/compare_direct.sh [--rounds=K] [--iters=N]
set -euo pipefail
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
rounds=3
iters=2000
for a in "$@"; do
  case "$a" in
    --rounds=*) rounds="${a#*=}" ;;
    --iters=*) iters="${a#*=}" ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "compare_direct.sh: unknown argument $a" >&2; exit 2 ;;
  esac
done
[[ $rounds =~ ^[1-9][0-9]*$ && $iters =~ ^[1-9][0-9]*$ ]] ||
  { echo "compare_direct.sh: --rounds and --iters are positive counts" >&2; exit 2; }
export UCX_TLS=tcp
cd "$repo"
bazel build //daemon:kolod //koloctl:koloctl //examples/bench:allreduce_perf \
  //examples/bench:resnet50_grads >&2
dir=$(mktemp -d /tmp/kolo-direct-XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$dir"; }
trap cleanup EXIT
# start_daemons, run_ranks, stop_daemons, need_openmpi and mpi_loopback.
source "$repo/examples/bench/daemons_lib.sh"

one_mode() {  # round mode(true|false)
  local r=$1 mode=$2
  kolod_extra="--direct_ready=$mode"
  for nodes in 2 3; do
    start_daemons "$nodes"
    run_ranks "$nodes" "lat$nodes" bazel-bin/examples/bench/allreduce_perf --min_bytes=8 \
      --max_bytes=8 --iters="$iters" --warmup=50 >"$dir/lat$nodes.$mode.$r.txt"
    if [[ $nodes -eq 2 ]]; then
      run_ranks 2 mid bazel-bin/examples/bench/allreduce_perf --min_bytes=65536 \
        --max_bytes=1048576 --iters=200 --warmup=10 >"$dir/mid.$mode.$r.txt"
      run_ranks 2 resnet bazel-bin/examples/bench/resnet50_grads --steps=10 --warmup=2 \
        >"$dir/resnet.$mode.$r.txt"
    fi
    stop_daemons
  done
}

for r in $(seq 1 "$rounds"); do
  echo "== round $r of $rounds" >&2
  if (( r % 2 )); then one_mode "$r" true; one_mode "$r" false
  else one_mode "$r" false; one_mode "$r" true; fi
done

if need_openmpi; then
  mpi_loopback 2 --min_bytes=8 --max_bytes=8 --iters="$iters" --warmup=50 >"$dir/mpi_lat2.txt" || true
  mpi_loopback 3 --min_bytes=8 --max_bytes=8 --iters="$iters" --warmup=50 >"$dir/mpi_lat3.txt" || true
  mpi_loopback 2 --min_bytes=65536 --max_bytes=1048576 --iters=200 --warmup=10 \
    >"$dir/mpi_mid.txt" || true
fi

python3 - "$dir" "$rounds" <<'PY'
import glob, os, statistics, sys
d, rounds = sys.argv[1], int(sys.argv[2])

def times(path):
    """size -> median time (us) of an allreduce_perf / mpi_allreduce_perf output."""
    out = {}
    if os.path.exists(path):
        for line in open(path):
            f = line.split()
            if len(f) >= 5 and f[0].isdigit():
                out[int(f[0])] = float(f[2])
    return out

def resnet(path):
    if os.path.exists(path):
        lines = open(path).read().splitlines()
        for i, line in enumerate(lines):
            if line.split()[:1] == ["p50(ms)"] and i + 1 < len(lines):
                return float(lines[i + 1].split()[0])
    return None

def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None

def fmt(v, w=10, p=1):
    return f"{v:{w}.{p}f}" if v is not None else f"{'n/a':>{w}}"

rows = []
for nodes in (2, 3):
    on = med(times(f"{d}/lat{nodes}.true.{r}.txt").get(8) for r in range(1, rounds + 1))
    off = med(times(f"{d}/lat{nodes}.false.{r}.txt").get(8) for r in range(1, rounds + 1))
    rows.append((f"8 B, {nodes} daemons (us)", on, off, times(f"{d}/mpi_lat{nodes}.txt").get(8)))
mpi_mid = times(f"{d}/mpi_mid.txt")
for size in sorted(times(f"{d}/mid.true.1.txt")):
    on = med(times(f"{d}/mid.true.{r}.txt").get(size) for r in range(1, rounds + 1))
    off = med(times(f"{d}/mid.false.{r}.txt").get(size) for r in range(1, rounds + 1))
    rows.append((f"{size // 1024} KiB, 2 daemons (us)", on, off, mpi_mid.get(size)))
on = med(resnet(f"{d}/resnet.true.{r}.txt") for r in range(1, rounds + 1))
off = med(resnet(f"{d}/resnet.false.{r}.txt") for r in range(1, rounds + 1))
rows.append(("ResNet-50 step, 2 daemons (ms)", on, off, None))

print(f"# medians over {rounds} alternating rounds; direct = kolod --direct_ready (default)")
print(f"{'figure':<32}{'direct':>10}{'via coord':>10}{'ratio':>7}{'OpenMPI':>10}{'kolo/mpi':>9}")
for name, on, off, mpi in rows:
    ratio = on / off if on and off else None
    vs = on / mpi if on and mpi else None
    print(f"{name:<32}{fmt(on)}{fmt(off)}{fmt(ratio, 7, 2)}{fmt(mpi)}{fmt(vs, 9, 2)}")
PY
