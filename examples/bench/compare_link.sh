#!/bin/bash
# compare_link.sh: Kolo on a link slower than the CPUs. Builds N network
# namespaces on this machine, one per "node", joined by veth pairs (2 nodes:
# one pair; 3 nodes: each node's pair to a bridge in a namespace of its own),
# with `tc qdisc ... tbf rate R burst 256kb latency 20ms` on both ends of every
# link, so that each node reaches the others at R in each direction. Then:
#   1. the link itself: one iperf3 stream and two opposite streams at once
#      (Debian's iperf3, installed if missing; ucx_perftest tag_bw if not);
#   2. one kolod per namespace (Peer plane in plaintext on the namespace's
#      address, UCX_TLS=tcp on the namespace's device) and allreduce_perf
#      with --ranks_per_node ranks per namespace, 8 B to --max_bytes;
#   3. OpenMPI's mpi_allreduce_perf over TCP across the same namespaces
#      (mpirun runs inside the first namespace; its launch agent starts the
#      other nodes' orted with `ip netns exec`; --mca btl tcp,self, so two
#      ranks of one node talk TCP over that node's own address);
#   4. ResNet-50's 161 gradients (resnet50_grads --steps=10 --warmup=2).
# Prints per size: the link's rate, OpenMPI's busbw, Kolo's busbw, Kolo / rate
# and Kolo / OpenMPI (GB/s; busbw counts all ranks, n = nodes x ranks_per_node),
# and ResNet-50's step against its bound, bytes x 2(N-1)/N / rate (N = nodes).
# Needs root, `ip netns` and tc's tbf; without them it says why and exits 0.
# Addresses: 10.213.0.x/24, inside the namespaces only. Everything it made
# (daemons, namespaces, bridge) is removed on every exit.
#
# usage: examples/bench/compare_link.sh --rate 2gbit|8gbit --nodes 2|3
#          [--ranks_per_node 1|2] [--max_bytes B] [--iters K] [--quick]
#   --rate R          the tbf rate of every link end (default 2gbit)
#   --nodes N         namespaces, one kolod each (default 2)
#   --ranks_per_node  ranks per namespace (default 1)
#   --max_bytes B     the sweep's largest size (default 268435456, 256 MiB)
#   --iters K         timed allreduces per size (default 10; --quick: 3)
#   --quick           a few sizes (8 B, 64 KiB, 1 MiB, 16 MiB), few iters
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
rate=2gbit nodes=2 rpn=1 max_bytes=268435456 iters="" quick=0
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  a=$1; shift
  case "$a" in
    --*=*) set -- "${a#*=}" "$@"; a=${a%%=*} ;;
  esac
  case "$a" in
    --rate|--nodes|--ranks_per_node|--max_bytes|--iters)
      [[ $# -gt 0 ]] || { echo "compare_link.sh: $a needs a value" >&2; exit 2; } ;;
  esac
  case "$a" in
    --rate) rate=$1; shift ;;
    --nodes) nodes=$1; shift ;;
    --ranks_per_node) rpn=$1; shift ;;
    --max_bytes) max_bytes=$1; shift ;;
    --iters) iters=$1; shift ;;
    --quick) quick=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "compare_link.sh: unknown argument $a (see --help)" >&2; exit 2 ;;
  esac
done
[[ $nodes == 2 || $nodes == 3 ]] || { echo "compare_link.sh: --nodes is 2 or 3" >&2; exit 2; }
[[ $rpn == 1 || $rpn == 2 ]] || { echo "compare_link.sh: --ranks_per_node is 1 or 2" >&2; exit 2; }
[[ $max_bytes =~ ^[0-9]+$ && $max_bytes -ge 8 ]] || { echo "compare_link.sh: bad --max_bytes" >&2; exit 2; }
[[ -z $iters || $iters =~ ^[1-9][0-9]*$ ]] || { echo "compare_link.sh: bad --iters" >&2; exit 2; }
[[ $rate =~ ^[1-9][0-9]*[gm]bit$ ]] || { echo "compare_link.sh: --rate is like 2gbit or 8gbit" >&2; exit 2; }
case "$rate" in
  *gbit) rate_bps=$(( ${rate%gbit} * 1000000000 )) ;;
  *mbit) rate_bps=$(( ${rate%mbit} * 1000000 )) ;;
  *) echo "compare_link.sh: --rate is like 2gbit or 8gbit" >&2; exit 2 ;;
esac
if [[ $quick == 1 ]]; then iters=${iters:-3}; warmup=1; else iters=${iters:-10}; warmup=2; fi

skip() { echo "compare_link.sh: SKIP: $*"; exit 0; }
[[ $(id -u) -eq 0 ]] || skip "needs root (network namespaces and tc)"
command -v ip >/dev/null || skip "no ip (iproute2)"
command -v tc >/dev/null || skip "no tc (iproute2)"
ip netns list >/dev/null 2>&1 || skip "ip netns does not work here"

cd "$repo"
bazel build //daemon:kolod //examples/bench:allreduce_perf //examples/bench:resnet50_grads >&2
if ! command -v iperf3 >/dev/null; then
  DEBIAN_FRONTEND=noninteractive timeout 300 apt-get install -y -q iperf3 >&2 ||
    echo "NOTE: iperf3 could not be installed; the link is checked with ucx_perftest" >&2
fi
if ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; then
  DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -q openmpi-bin libopenmpi-dev >&2 ||
    echo "NOTE: OpenMPI could not be installed; no MPI column" >&2
fi

dir=$(mktemp -d /tmp/kolo-link-XXXXXX)
prefix="kolo-link-$$"
dev=klink                     # every node's device, in its own namespace
made=()                       # namespaces made, for cleanup
pids=()                       # processes started, for cleanup
ns_of() { echo "$prefix-$1"; }
addr_of() { echo "10.213.0.$(($1 + 1))"; }
cleanup() {
  set +e
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  sleep 0.3
  for ns in "${made[@]}"; do
    # Anything still inside one of our namespaces was started by this script.
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null
  done
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- 1. the namespaces and links
mk_ns() { ip netns add "$1" 2>/dev/null || skip "ip netns add $1 failed"; made+=("$1"); ip -n "$1" link set lo up; }
shape() {  # ns dev
  tc -n "$1" qdisc add dev "$2" root tbf rate "$rate" burst 256kb latency 20ms ||
    skip "tc tbf on $2 in $1 failed"
}
for k in $(seq 0 $((nodes - 1))); do mk_ns "$(ns_of "$k")"; done
if [[ $nodes -eq 2 ]]; then
  ip link add "$dev" netns "$(ns_of 0)" type veth peer name "$dev" netns "$(ns_of 1)" ||
    skip "cannot make a veth pair between namespaces"
else
  br=$(ns_of br)
  mk_ns "$br"
  ip -n "$br" link add klbr type bridge || skip "cannot make a bridge"
  ip -n "$br" link set klbr up
  for k in $(seq 0 $((nodes - 1))); do
    ip link add "$dev" netns "$(ns_of "$k")" type veth peer name "p$k" netns "$br" ||
      skip "cannot make a veth pair between namespaces"
    ip -n "$br" link set "p$k" master klbr
    ip -n "$br" link set "p$k" up
    shape "$br" "p$k"
  done
fi
for k in $(seq 0 $((nodes - 1))); do
  ns=$(ns_of "$k")
  ip -n "$ns" addr add "$(addr_of "$k")/24" dev "$dev"
  ip -n "$ns" link set "$dev" up
  shape "$ns" "$dev"
done
# Wait (bounded) until every node answers node 0.
for k in $(seq 1 $((nodes - 1))); do
  for _ in $(seq 1 50); do
    ip netns exec "$(ns_of 0)" ping -c1 -W1 "$(addr_of "$k")" >/dev/null 2>&1 && break
    sleep 0.2
  done
done
echo "== $nodes namespaces ($prefix-*), $([[ $nodes -eq 2 ]] && echo "one veth pair" || echo "veth pairs to a bridge"), tbf rate $rate on both ends of every link"

# --- 2. the link: one stream, then two opposite streams at once
one=""; both=""
gbps() { [[ -n $1 ]] && python3 -c "print(f'{$1:.3f}')" || echo n/a; }
if command -v iperf3 >/dev/null; then
  iperf_rx() { python3 -c 'import json,sys
try: print(json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"] / 1e9)
except Exception: print("")' "$1"; }
  stream() {  # from to port out: an iperf3 client in node from, its server in node to
    ip netns exec "$(ns_of "$2")" timeout 20 iperf3 -s -1 -p "$3" >/dev/null 2>&1 &
    local s=$!; pids+=("$s"); sleep 0.5
    ip netns exec "$(ns_of "$1")" timeout 15 iperf3 -c "$(addr_of "$2")" -p "$3" -t 3 -J >"$4" 2>&1 &
    wait $! || true
  }
  stream 0 1 5201 "$dir/iperf_one.json"
  one=$(iperf_rx "$dir/iperf_one.json")
  stream 0 1 5202 "$dir/iperf_fwd.json" & f=$!
  stream 1 0 5203 "$dir/iperf_rev.json"
  wait "$f" || true
  fwd=$(iperf_rx "$dir/iperf_fwd.json") rev=$(iperf_rx "$dir/iperf_rev.json")
  tool="iperf3 (TCP)"
elif command -v ucx_perftest >/dev/null; then
  final_gbps() { awk '/Final:/ {printf "%.4f\n", $6 * 8 / 1000}' "$1" | tail -1; }
  stream() {
    UCX_TLS=tcp UCX_NET_DEVICES=$dev ip netns exec "$(ns_of "$2")" timeout 30 ucx_perftest -p "$3" >/dev/null 2>&1 &
    local s=$!; pids+=("$s"); sleep 1
    UCX_TLS=tcp UCX_NET_DEVICES=$dev ip netns exec "$(ns_of "$1")" timeout 25 ucx_perftest "$(addr_of "$2")" \
      -p "$3" -t tag_bw -s 4194304 -n 100 >"$4" 2>&1 &
    wait $! || true
  }
  stream 0 1 5201 "$dir/ucx_one.txt"; one=$(final_gbps "$dir/ucx_one.txt")
  stream 0 1 5202 "$dir/ucx_fwd.txt" & f=$!
  stream 1 0 5203 "$dir/ucx_rev.txt"
  wait "$f" || true
  fwd=$(final_gbps "$dir/ucx_fwd.txt") rev=$(final_gbps "$dir/ucx_rev.txt")
  tool="ucx_perftest tag_bw (UCX tcp)"
else
  tool=""
  echo "NOTE: neither iperf3 nor ucx_perftest: the link is not checked"
fi
if [[ -n $tool ]]; then
  echo "== the link, node0 -> node1, $tool; tbf rate $(gbps "$rate_bps / 1e9") Gbit/s"
  echo "one stream:                   $(gbps "$one") Gbit/s"
  echo "two opposite streams at once: $(gbps "${fwd:-}") (0->1) and $(gbps "${rev:-}") (1->0) Gbit/s"
  [[ -n ${fwd:-} && -n ${rev:-} ]] && both=$(python3 -c "print(min($fwd, $rev))")
fi

# --- 3. Kolo: one kolod per namespace, ranks_per_node ranks in each
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
export UCX_TLS=tcp UCX_NET_DEVICES=$dev
for k in $(seq 0 $((nodes - 1))); do
  ip netns exec "$(ns_of "$k")" "$repo/bazel-bin/daemon/kolod" --socket "$dir/n$k.sock" \
    --peer_address="$(addr_of "$k"):7371" --peer_plaintext --status_address= \
    --node_name="node$k" --log_level=warn >"$dir/kolod$k.log" 2>&1 &
  pids+=($!)
done
for k in $(seq 0 $((nodes - 1))); do
  for _ in $(seq 1 200); do [[ -S "$dir/n$k.sock" ]] && break; sleep 0.05; done
  [[ -S "$dir/n$k.sock" ]] || { echo "kolod node$k did not start:"; cat "$dir/kolod$k.log"; exit 1; }
done
size=$((nodes * rpn))
run_kolo() {  # job limit_s cmd...: every rank in its node's namespace; rank 0's output
  local job=$1 limit=$2; shift 2
  local rp=() rc=0 k l r
  for k in $(seq 0 $((nodes - 1))); do
    for l in $(seq 0 $((rpn - 1))); do
      r=$((k * rpn + l))
      KOLO_SOCKET="$dir/n$k.sock" KOLO_JOB_ID="$job" KOLO_JOB_TOKEN=$token KOLO_RANK=$r \
        KOLO_SIZE=$size KOLO_LOCAL_RANK=$l KOLO_LOCAL_SIZE=$rpn \
        KOLO_COORDINATOR="$(addr_of 0):7371" \
        ip netns exec "$(ns_of "$k")" timeout "$limit" "$@" >"$dir/$job.$r.out" 2>&1 &
      rp+=($!)
    done
  done
  for p in "${rp[@]}"; do wait "$p" || rc=$?; done
  cat "$dir/$job.0.out"
  [[ $rc -eq 0 ]] || { echo "NOTE: a rank of $job failed (rc $rc):"; grep -h . "$dir/$job".*.out | grep -iv '^#' | tail -5; }
}
# The sizes: one sweep, or with --quick a few single sizes.
sweeps=()
if [[ $quick == 1 ]]; then
  for s in 8 65536 1048576 16777216; do [[ $s -le $max_bytes ]] && sweeps+=("$s:$s"); done
else
  sweeps=("8:$max_bytes")
fi
# A generous bound per run: 100x the largest size's time on the link, at least 3 minutes.
limit=$(python3 -c "print(max(180, int(100 * $max_bytes * 2 / ($rate_bps / 8) * ($iters + $warmup))))")
limit=$((limit > 1800 ? 1800 : limit))
echo "== Kolo allreduce_perf: $nodes nodes x $rpn ranks, UCX_TLS=tcp on $dev, iters $iters"
: >"$dir/kolo.txt"
for sw in "${sweeps[@]}"; do
  # No pipelines in the foreground: a signal's trap then runs at once.
  run_kolo "perf-${sw%%:*}" "$limit" "$repo/bazel-bin/examples/bench/allreduce_perf" \
    --min_bytes="${sw%%:*}" --max_bytes="${sw##*:}" --iters="$iters" --warmup="$warmup" >"$dir/part.txt"
  cat "$dir/part.txt"; cat "$dir/part.txt" >>"$dir/kolo.txt"
done
echo "== ResNet-50 gradients (161 tensors) across $nodes nodes x $rpn ranks"
run_kolo resnet 600 "$repo/bazel-bin/examples/bench/resnet50_grads" --steps=10 --warmup=2 >"$dir/resnet.txt"
cat "$dir/resnet.txt"
for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
pids=()

# --- 4. OpenMPI over TCP across the same namespaces
mpi_note=""
if command -v mpicc >/dev/null && command -v mpirun >/dev/null; then
  mpicc -O2 -o "$dir/mpi_allreduce_perf" examples/bench/mpi_allreduce_perf.c -lm
  # The launch agent: mpirun (in node 0's namespace) calls it as `agent HOST
  # COMMAND...` for a node other than its own; it runs COMMAND in HOST's namespace.
  {
    echo '#!/bin/bash'
    echo 'host=$1; shift'
    echo 'case "$host" in'
    for k in $(seq 0 $((nodes - 1))); do echo "  $(addr_of "$k")) ns=$(ns_of "$k") ;;"; done
    echo '  *) echo "agent: unknown host $host" >&2; exit 1 ;;'
    echo 'esac'
    echo 'exec ip netns exec "$ns" /bin/sh -c "$*"'
  } >"$dir/agent.sh"
  chmod +x "$dir/agent.sh"
  for k in $(seq 0 $((nodes - 1))); do echo "$(addr_of "$k") slots=$rpn"; done >"$dir/hosts"
  echo "== OpenMPI MPI_Allreduce over TCP ($dev), $nodes nodes x $rpn processes"
  : >"$dir/mpi.txt"
  for sw in "${sweeps[@]}"; do
    ip netns exec "$(ns_of 0)" timeout "$limit" mpirun --allow-run-as-root --oversubscribe \
      --bind-to none --hostfile "$dir/hosts" -np "$size" --mca plm_rsh_agent "$dir/agent.sh" \
      --mca btl tcp,self --mca btl_tcp_if_include "$dev" --mca oob_tcp_if_include "$dev" \
      "$dir/mpi_allreduce_perf" --min_bytes="${sw%%:*}" --max_bytes="${sw##*:}" \
      --iters="$iters" --warmup="$warmup" >"$dir/part.txt" 2>"$dir/mpi.err" </dev/null &
    mrc=0; wait $! || mrc=$?
    cat "$dir/part.txt"; cat "$dir/part.txt" >>"$dir/mpi.txt"
    if [[ $mrc -ne 0 ]]; then
      mpi_note="mpirun failed (rc $mrc): $(tail -3 "$dir/mpi.err" | tr '\n' ' ')"
      echo "NOTE: $mpi_note"; break
    fi
    # Bounded: nothing of that run may be left in the namespaces.
    for k in $(seq 0 $((nodes - 1))); do
      for p in $(ip netns pids "$(ns_of "$k")"); do kill "$p" 2>/dev/null || true; done
    done
  done
else
  mpi_note="OpenMPI is not installed"
fi

# --- 5. the summary
echo "== summary: busbw in GB/s per size ($nodes nodes x $rpn ranks, tbf $rate per direction)"
python3 - "$dir" "$rate_bps" "$nodes" "${one:-}" "${both:-}" <<'PY'
import os, re, sys
d, rate_bps, nodes, one, both = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
rate = rate_bps / 8 / 1e9  # GB/s


def table(name):
    """size -> (busbw, time in us) of allreduce_perf / mpi_allreduce_perf output."""
    out = {}
    path = os.path.join(d, name)
    if os.path.exists(path):
        for line in open(path):
            f = line.split()
            if len(f) >= 5 and f[0].isdigit():
                try:
                    out[int(f[0])] = (float(f[4]), float(f[2]))
                except ValueError:
                    pass
    return out


nan = float("nan")
kolo, mpi = table("kolo.txt"), table("mpi.txt")
print(f"{'size(B)':>12} {'rate':>8} {'openmpi':>8} {'kolo':>8} {'kolo/rate':>9} {'kolo/mpi':>8}"
      f" {'mpi(us)':>11} {'kolo(us)':>11}")
fmt = lambda x, spec: format(x, spec) if x is not None else format(nan, spec)
for size in sorted(set(kolo) | set(mpi)):
    (k, kt), (m, mt) = kolo.get(size, (None, None)), mpi.get(size, (None, None))
    print(f"{size:>12} {rate:8.3f} {fmt(m, '8.4f')} {fmt(k, '8.4f')} "
          f"{fmt(k / rate if k is not None else None, '9.2f')} "
          f"{fmt(k / m if k is not None and m else None, '8.2f')} {fmt(mt, '11.1f')} {fmt(kt, '11.1f')}")
if one:
    print(f"link measured: one stream {float(one) / 8:.3f} GB/s"
          + (f", two opposite streams {float(both) / 8:.3f} GB/s each (the slower)" if both else ""))
text = open(os.path.join(d, "resnet.txt")).read() if os.path.exists(os.path.join(d, "resnet.txt")) else ""
b = re.search(r"\((\d+) B\) per step", text)
t = re.search(r"p50\(ms\).*\n\s*([0-9.]+)", text)
if b and t:
    bytes_, ms = int(b.group(1)), float(t.group(1))
    bound = bytes_ * 2 * (nodes - 1) / nodes / (rate * 1e9) * 1e3
    print(f"ResNet-50 step ({bytes_} B): {ms:.1f} ms; link bound {bound:.1f} ms "
          f"(bytes x 2(N-1)/N / rate, N = {nodes}); step / bound {ms / bound:.2f}")
else:
    print("ResNet-50 step: n/a")
PY
[[ -z $mpi_note ]] || echo "OpenMPI column incomplete: $mpi_note"
[[ $rpn -eq 1 ]] || echo "note: busbw's factor 2(n-1)/n counts all $size ranks; the link carries 2(N-1)/N per node (N = $nodes), so kolo/rate can exceed what the link allows"
