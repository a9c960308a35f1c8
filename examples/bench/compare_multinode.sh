#!/bin/bash
# compare_multinode.sh: Kolo across daemons on this machine (each daemon a
# "node" with its own socket and peer port, UCX over tcp on loopback), in one
# run next to the link's own capacity:
#   1. allreduce_perf with one rank per daemon, for 2 and 3 daemons;
#   2. ucx_perftest -t tag_bw on the same loopback tcp link (Debian ucx-utils,
#      installed if missing), the bandwidth a perfect transfer would reach;
#   3. the ResNet-50 gradient workload (161 tensors) and an 8-byte allreduce's
#      latency across 2 daemons;
#   4. OpenMPI's MPI_Allreduce over TCP on the same loopback (mpirun --mca btl
#      tcp,self; openmpi-bin installed if missing), 2 and 3 processes;
#   5. the link in both directions at once: two tag_bw streams, one each way,
#      as a ring allreduce uses it (on one machine both directions share the
#      same cores, so this, not one stream, is what a ring can reach here).
# Prints a table per size (Kolo, OpenMPI and their ratio, for 2 and 3 nodes),
# at the largest size Kolo's busbw against both link figures, ResNet-50's
# step against both link bounds, and the 8-byte latency of both.
#
# usage: examples/bench/compare_multinode.sh [--max_bytes=B] [--iters=K]
set -euo pipefail
# A job token of 128 random bits, as kolod wants.
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
max_bytes=67108864
iters=10
for a in "$@"; do
  case "$a" in
    --max_bytes=*) max_bytes="${a#*=}" ;;
    --iters=*) iters="${a#*=}" ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "compare_multinode.sh: unknown argument $a" >&2; exit 2 ;;
  esac
done
export UCX_TLS=tcp
cd "$repo"
bazel build //daemon:kolod //examples/bench:allreduce_perf //examples/bench:resnet50_grads >&2
dir=$(mktemp -d /tmp/kolo-multinode-XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$dir"; }
trap cleanup EXIT

# start_daemons, run_ranks, stop_daemons, need_command, need_openmpi and
# mpi_loopback.
source "$repo/examples/bench/daemons_lib.sh"
need_command ucx_perftest ucx-utils ||
  echo "NOTE: ucx-utils could not be installed; no link baseline" >&2

bazel build //koloctl:koloctl >&2
for nodes in 2 3; do
  start_daemons "$nodes"
  echo "== Kolo allreduce across $nodes daemons (1 rank each, UCX_TLS=tcp, loopback)"
  run_ranks "$nodes" "perf$nodes" bazel-bin/examples/bench/allreduce_perf \
    --min_bytes=1048576 --max_bytes="$max_bytes" --iters="$iters" --warmup=2 | tee "$dir/kolo$nodes.txt"
  if [[ $nodes -eq 2 ]]; then
    echo "== Kolo 8-byte allreduce across 2 daemons (latency)"
    run_ranks 2 lat2 bazel-bin/examples/bench/allreduce_perf --min_bytes=8 --max_bytes=8 \
      --iters=200 --warmup=10 | tee "$dir/kolo_lat2.txt"
    echo "== ResNet-50 gradients (161 tensors, 102 MB) across 2 daemons"
    run_ranks 2 resnet bazel-bin/examples/bench/resnet50_grads --steps=10 --warmup=2 |
      tee "$dir/resnet.txt"
    echo "== The same with op=Adasum across 2 daemons"
    run_ranks 2 resnet_adasum bazel-bin/examples/bench/resnet50_grads --steps=10 --warmup=2 \
      --op=adasum | tee "$dir/resnet_adasum.txt"
  fi
  stop_daemons
done

if need_openmpi; then
  for nodes in 2 3; do
    echo "== OpenMPI MPI_Allreduce over TCP on loopback, $nodes processes"
    mpi_loopback "$nodes" --min_bytes=1048576 --max_bytes="$max_bytes" --iters="$iters" \
      --warmup=2 | tee "$dir/mpi$nodes.txt" || true
  done
  echo "== OpenMPI 8-byte MPI_Allreduce over TCP on loopback, 2 processes (latency)"
  mpi_loopback 2 --min_bytes=8 --max_bytes=8 --iters=200 --warmup=10 | tee "$dir/mpi_lat2.txt" ||
    true
fi

# The "Final:" line's bandwidth column of a tag_bw client (MB/s, average).
final_mbs() { awk '/Final:/ {print $6}' "$1"; }
link=""
both=""
if command -v ucx_perftest >/dev/null; then
  echo "== ucx_perftest -t tag_bw on the same loopback tcp link, $max_bytes B"
  port=$((20000 + RANDOM % 20000))
  ucx_perftest -p "$port" >"$dir/perf_server.txt" 2>&1 &
  server=$!
  sleep 1
  ucx_perftest 127.0.0.1 -p "$port" -t tag_bw -s "$max_bytes" -n 20 >"$dir/perf_client.txt" 2>&1 || true
  kill "$server" 2>/dev/null || true
  grep -E "Final:" "$dir/perf_client.txt" | tail -1
  link=$(final_mbs "$dir/perf_client.txt")
  echo "== the same, two streams at once (one each way, as a ring uses the link)"
  p1=$((port + 1)) p2=$((port + 2))
  ucx_perftest -p "$p1" >"$dir/perf_server1.txt" 2>&1 &
  s1=$!
  ucx_perftest -p "$p2" >"$dir/perf_server2.txt" 2>&1 &
  s2=$!
  sleep 1
  ucx_perftest 127.0.0.1 -p "$p1" -t tag_bw -s "$max_bytes" -n 20 >"$dir/perf_both1.txt" 2>&1 &
  c1=$!
  ucx_perftest 127.0.0.1 -p "$p2" -t tag_bw -s "$max_bytes" -n 20 >"$dir/perf_both2.txt" 2>&1 || true
  wait "$c1" || true
  kill "$s1" "$s2" 2>/dev/null || true
  grep -h -E "Final:" "$dir/perf_both1.txt" "$dir/perf_both2.txt" || true
  b1=$(final_mbs "$dir/perf_both1.txt") b2=$(final_mbs "$dir/perf_both2.txt")
  # Each direction's own rate: the two streams' average.
  [[ -n "$b1" && -n "$b2" ]] && both=$(python3 -c "print(($b1 + $b2) / 2)")
fi

echo "== summary: busbw in GB/s per size (Kolo and OpenMPI over TCP, same loopback)"
python3 - "$dir" <<'PY'
import os, sys
d = sys.argv[1]

def table(name):
    """size -> busbw of an allreduce_perf / mpi_allreduce_perf output."""
    out = {}
    path = os.path.join(d, name)
    if not os.path.exists(path):
        return out
    for line in open(path):
        f = line.split()
        if len(f) >= 5 and f[0].isdigit():
            out[int(f[0])] = float(f[4])
    return out

cols = [(n, table(f"kolo{n}.txt"), table(f"mpi{n}.txt")) for n in (2, 3)]
head = f"{'size(B)':>12}"
for n, _, _ in cols:
    head += f" {'kolo' + str(n):>8} {'mpi' + str(n):>8} {'ratio':>6}"
print(head)
for size in sorted(cols[0][1]):
    row = f"{size:>12}"
    for n, kolo, mpi in cols:
        k, m = kolo.get(size), mpi.get(size)
        row += f" {k if k is not None else float('nan'):8.3f}"
        row += f" {m if m is not None else float('nan'):8.3f}"
        row += f" {k / m if k and m else float('nan'):6.2f}"
    print(row)
PY
kolo64=$(awk -v s="$max_bytes" '$1 == s {print $5}' "$dir/kolo2.txt" | tail -1)
echo "== summary at $max_bytes B, 2 daemons"
echo "kolo busbw (GB/s): ${kolo64:-n/a}"
if [[ -n "$link" && -n "$kolo64" ]]; then
  python3 -c "k=float('$kolo64'); l=float('$link')/1000; print(f'link, one stream (ucx_perftest tag_bw, GB/s): {l:.3f}'); print(f'kolo / link: {k/l:.2f}')"
fi
# ResNet-50's step against the link bound: its gradient bytes x 2(n-1)/n
# (n = 2) over one tag_bw stream.
resnet_ms=$(awk '/^ +[0-9.]+ +[0-9.]+ +[0-9]+ / {print $1; exit}' "$dir/resnet.txt" 2>/dev/null || true)
resnet_bytes=$(sed -n 's/.*(\([0-9]*\) B) per step.*/\1/p' "$dir/resnet.txt" 2>/dev/null | head -1 || true)
if [[ -n "$link" && -n "$resnet_ms" && -n "$resnet_bytes" ]]; then
  python3 -c "b=$resnet_bytes; l=float('$link')*1e6; t=float('$resnet_ms'); bound=b*1.0/l*1e3; print(f'ResNet-50 step across 2 daemons: {t:.1f} ms, link bound {bound:.1f} ms, ratio {t/bound:.2f}')"
fi
if [[ -n "$both" && -n "$kolo64" ]]; then
  python3 -c "k=float('$kolo64'); l=float('$both')/1000; print(f'link, both directions at once (per direction, GB/s): {l:.3f}'); print(f'kolo / link both ways: {k/l:.2f}')"
fi
if [[ -n "$both" && -n "$resnet_ms" && -n "$resnet_bytes" ]]; then
  python3 -c "b=$resnet_bytes; l=float('$both')*1e6; t=float('$resnet_ms'); bound=b*1.0/l*1e3; print(f'ResNet-50 against the link both ways: bound {bound:.1f} ms, ratio {t/bound:.2f}')"
fi
# The 8-byte allreduce's median (allreduce_perf's time column).
kolo_lat=$(awk '$1 == 8 {print $3}' "$dir/kolo_lat2.txt" 2>/dev/null | tail -1 || true)
mpi_lat=$(awk '$1 == 8 {print $3}' "$dir/mpi_lat2.txt" 2>/dev/null | tail -1 || true)
echo "8-byte allreduce across 2 daemons (us): kolo ${kolo_lat:-n/a}, OpenMPI over TCP ${mpi_lat:-n/a}"
