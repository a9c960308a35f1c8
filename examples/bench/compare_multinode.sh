#!/bin/bash
# compare_multinode.sh: Kolo across daemons on this machine (each daemon a
# "node" with its own socket and peer port, UCX over tcp on loopback), in one
# run next to the link's own capacity:
#   1. allreduce_perf with one rank per daemon, for 2 and 3 daemons;
#   2. ucx_perftest -t tag_bw on the same loopback tcp link (Debian ucx-utils,
#      installed if missing), the bandwidth a perfect transfer would reach;
#   3. the ResNet-50 gradient workload (161 tensors) across 2 daemons.
# Prints busbw next to the link bandwidth and their ratio at 64 MiB.
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
if ! command -v ucx_perftest >/dev/null; then
  sudo_cmd=(); [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -q ucx-utils >&2 ||
    echo "NOTE: ucx-utils could not be installed; no link baseline" >&2
fi
dir=$(mktemp -d /tmp/kolo-multinode-XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$dir"; }
trap cleanup EXIT

start_daemons() {  # count
  # The Peer plane runs mutual TLS, as on a cluster (a test CA, loopback names).
  tools/make_test_ca.sh "$dir/certs" $(seq -f 'node%g' 0 $(($1 - 1))) >&2
  for n in $(seq 0 $(($1 - 1))); do
    bazel-bin/daemon/kolod --socket "$dir/n$n.sock" --status_address= \
      --peer_address=127.0.0.1:0 --peer_tls_ca="$dir/certs/ca.pem" \
      --peer_tls_cert="$dir/certs/node$n.pem" --peer_tls_key="$dir/certs/node$n.key" \
      --node_name="node$n" --log_level=warn >"$dir/n$n.log" 2>&1 &
    pids+=($!)
  done
  for n in $(seq 0 $(($1 - 1))); do
    for _ in $(seq 1 200); do [[ -S "$dir/n$n.sock" ]] && break; sleep 0.05; done
  done
}
peer_of() {  # socket -> peer address of that daemon (it may still be starting)
  local out
  for _ in $(seq 1 50); do
    out=$("$repo/bazel-bin/koloctl/koloctl" --socket "$1" --json status 2>/dev/null) && break
    sleep 0.1
  done
  python3 -c 'import json,sys; print(json.load(sys.stdin)["node"]["config"]["peer_address"])' \
    <<<"$out"
}
run_ranks() {  # nodes job binary args...
  local nodes=$1 job=$2; shift 2
  local coordinator; coordinator=$(peer_of "$dir/n0.sock")
  local rp=()
  for n in $(seq 0 $((nodes - 1))); do
    KOLO_SOCKET="$dir/n$n.sock" KOLO_JOB_ID="$job" KOLO_JOB_TOKEN=$token KOLO_RANK=$n \
      KOLO_SIZE=$nodes KOLO_LOCAL_RANK=0 KOLO_LOCAL_SIZE=1 KOLO_COORDINATOR="$coordinator" \
      "$@" >"$dir/$job.$n.out" 2>&1 &
    rp+=($!)
  done
  for p in "${rp[@]}"; do wait "$p"; done
  cat "$dir/$job.0.out"
}

bazel build //koloctl:koloctl >&2
for nodes in 2 3; do
  start_daemons "$nodes"
  echo "== Kolo allreduce across $nodes daemons (1 rank each, UCX_TLS=tcp, loopback)"
  run_ranks "$nodes" "perf$nodes" bazel-bin/examples/bench/allreduce_perf \
    --min_bytes=1048576 --max_bytes="$max_bytes" --iters="$iters" --warmup=2 | tee "$dir/kolo$nodes.txt"
  if [[ $nodes -eq 2 ]]; then
    echo "== ResNet-50 gradients (161 tensors, 102 MB) across 2 daemons"
    run_ranks 2 resnet bazel-bin/examples/bench/resnet50_grads --steps=10 --warmup=2
  fi
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  pids=()
  sleep 0.5
done

link=""
if command -v ucx_perftest >/dev/null; then
  echo "== ucx_perftest -t tag_bw on the same loopback tcp link, $max_bytes B"
  port=$((20000 + RANDOM % 20000))
  ucx_perftest -p "$port" >"$dir/perf_server.txt" 2>&1 &
  server=$!
  sleep 1
  ucx_perftest 127.0.0.1 -p "$port" -t tag_bw -s "$max_bytes" -n 20 >"$dir/perf_client.txt" 2>&1 || true
  kill "$server" 2>/dev/null || true
  grep -E "Final:|^\s+[0-9]" "$dir/perf_client.txt" | tail -3
  # The "Final:" line's bandwidth column (MB/s, average).
  link=$(awk '/Final:/ {print $6}' "$dir/perf_client.txt")
fi
kolo64=$(awk -v s="$max_bytes" '$1 == s {print $5}' "$dir/kolo2.txt" | tail -1)
echo "== summary at $max_bytes B, 2 daemons"
echo "kolo busbw (GB/s): ${kolo64:-n/a}"
if [[ -n "$link" && -n "$kolo64" ]]; then
  python3 -c "k=float('$kolo64'); l=float('$link')/1000; print(f'link (ucx_perftest tag_bw, GB/s): {l:.3f}'); print(f'kolo / link: {k/l:.2f}')"
fi
