#!/usr/bin/env bash
# Two nodes in their own network namespaces, joined by a veth pair, one kolod
# in each and two ranks per node: every dtype and op, broadcast from every
# root and sizes up to 64 MiB give the same results as on one node. With
# tc netem available, the link also gets 2 ms of delay and 1% loss.
# Needs root (namespaces); says why and passes when it cannot run.
set -euo pipefail
# A job token of 128 random bits, as kolod wants.
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
export PATH="$PATH:/usr/sbin:/sbin"

if [[ $(id -u) -ne 0 ]]; then
  echo "SKIP: network namespaces need root"; exit 0
fi
if ! command -v ip >/dev/null; then
  echo "SKIP: ip (iproute2) is not installed"; exit 0
fi

kolod="$PWD/daemon/kolod"
rank="$PWD/tests/integration/test_rank"
tag="k$$"
a="kolo-$tag-a"; b="kolo-$tag-b"
dir=$(mktemp -d /tmp/kolo-netns-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  ip netns del "$a" 2>/dev/null || true
  ip netns del "$b" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

if ! ip netns add "$a" 2>"$dir/err"; then
  echo "SKIP: cannot create network namespaces here: $(cat "$dir/err")"; exit 0
fi
ip netns add "$b"
ip link add "veth-$tag-a" type veth peer name "veth-$tag-b"
ip link set "veth-$tag-a" netns "$a"
ip link set "veth-$tag-b" netns "$b"
# Addresses of the test's own hosts, inside namespaces this test made.
ip -n "$a" addr add 10.254.77.1/30 dev "veth-$tag-a"
ip -n "$b" addr add 10.254.77.2/30 dev "veth-$tag-b"
for ns in "$a" "$b"; do
  ip -n "$ns" link set lo up
done
ip -n "$a" link set "veth-$tag-a" up
ip -n "$b" link set "veth-$tag-b" up

if ip netns exec "$a" tc qdisc add dev "veth-$tag-a" root netem delay 2ms loss 1% 2>"$dir/err" &&
   ip netns exec "$b" tc qdisc add dev "veth-$tag-b" root netem delay 2ms loss 1% 2>>"$dir/err"; then
  echo "link: veth with netem delay 2ms loss 1%"
else
  echo "NOTE: tc netem is unavailable in this kernel ($(head -1 "$dir/err")); the link has no delay or loss"
fi

# Mutual TLS between the daemons, as an operator sets it up: one CA, and a
# certificate per daemon naming the address the other daemon dials.
certs="$dir/certs"
EXTRA_SANS="IP:10.254.77.1" "$PWD/tools/make_test_ca.sh" "$certs" nodeA
EXTRA_SANS="IP:10.254.77.2" "$PWD/tools/make_test_ca.sh" "$certs" nodeB

start_daemon() {  # ns address name
  ip netns exec "$1" "$kolod" --socket "$dir/$3.sock" --status_address= \
    --peer_address="$2:7371" --peer_tls_ca="$certs/ca.pem" --peer_tls_cert="$certs/$3.pem" \
    --peer_tls_key="$certs/$3.key" --node_name="$3" --peer_timeout_s=20 >"$dir/$3.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 200); do
    [[ -S "$dir/$3.sock" ]] && return 0
    sleep 0.05
  done
  echo "FAIL: kolod $3 did not start"; cat "$dir/$3.log"; exit 1
}
start_daemon "$a" 10.254.77.1 nodeA
start_daemon "$b" 10.254.77.2 nodeB

run_job() {  # scenario
  local job="netns-$1" rpids=() failed=0
  for node in 0 1; do
    local ns=$a sock=$dir/nodeA.sock
    [[ $node -eq 1 ]] && ns=$b && sock=$dir/nodeB.sock
    for local_rank in 0 1; do
      local r=$((node * 2 + local_rank))
      ip netns exec "$ns" env UCX_TLS=tcp KOLO_SOCKET="$sock" KOLO_JOB_ID="$job" \
        KOLO_JOB_TOKEN=$token KOLO_RANK=$r KOLO_SIZE=4 KOLO_LOCAL_RANK=$local_rank \
        KOLO_LOCAL_SIZE=2 KOLO_COORDINATOR=10.254.77.1:7371 \
        timeout 300 "$rank" "$1" >"$dir/$job.$r.log" 2>&1 &
      rpids+=($!)
    done
  done
  for i in "${!rpids[@]}"; do
    if ! wait "${rpids[$i]}"; then
      failed=1
      echo "--- rank $i of $1 failed:"; cat "$dir/netns-$1.$i.log"
    fi
  done
  [[ $failed -eq 0 ]] || { echo "FAIL: $1"; cat "$dir"/node*.log; exit 1; }
  echo "PASS: $1 on 2 namespaces x 2 ranks"
}
run_job matrix
run_job broadcast
run_job sizes

# Cut the link under a running job: node A's ranks must end with ABORTED
# naming node B once the peer timeout (20 s here) has passed.
job=netns-cut
rpids=()
for node in 0 1; do
  ns=$a; sock=$dir/nodeA.sock
  [[ $node -eq 1 ]] && ns=$b && sock=$dir/nodeB.sock
  for local_rank in 0 1; do
    r=$((node * 2 + local_rank))
    ip netns exec "$ns" env UCX_TLS=tcp KOLO_SOCKET="$sock" KOLO_JOB_ID="$job" \
      KOLO_JOB_TOKEN=$token KOLO_RANK=$r KOLO_SIZE=4 KOLO_LOCAL_RANK=$local_rank \
      KOLO_LOCAL_SIZE=2 KOLO_COORDINATOR=10.254.77.1:7371 \
      timeout 120 "$rank" hold >"$dir/$job.$r.log" 2>&1 &
    rpids+=($!)
  done
done
for _ in $(seq 1 400); do
  grep -q holding "$dir/$job.0.log" 2>/dev/null && grep -q holding "$dir/$job.3.log" 2>/dev/null && break
  sleep 0.05
done
ip -n "$b" link set "veth-$tag-b" down
cut_at=$(date +%s)
wait "${rpids[0]}" "${rpids[1]}" || true
took=$(( $(date +%s) - cut_at ))
for r in 0 1; do
  if ! grep -q "ABORTED" "$dir/$job.$r.log" || ! grep -q "nodeB" "$dir/$job.$r.log"; then
    echo "FAIL: rank $r did not end with ABORTED naming nodeB:"; cat "$dir/$job.$r.log"; exit 1
  fi
done
echo "PASS: cut link aborted the job on node A after ${took} s: $(grep -h ended "$dir/$job.0.log")"
for p in "${rpids[@]:2}"; do kill "$p" 2>/dev/null || true; done
echo "PASS"
