#!/usr/bin/env bash
# The fault matrix (docs/reliability.md, "Fault matrix"): builds kolod and the
# fault rank, then runs every fault row against real processes and prints the
# table. Cross-node rows need root (network namespaces); without it they are
# skipped with the reason. Extra arguments go to tests/faults/fault_matrix.py
# (e.g. --single_node_only, --peer_timeout_s=10, --keep).
set -euo pipefail
cd "$(dirname "$0")/.."
targets=(//daemon:kolod //tests/faults:fault_rank //tests/faults:fault_attacker)
# The lossy-link row where the kernel has no tc netem: iptables and an
# NFQUEUE delayer (Debian: iptables, libnetfilter-queue-dev).
nfq=()
if [[ -f /usr/include/libnetfilter_queue/libnetfilter_queue.h ]]; then
  targets+=(//tests/faults:nfq_delay)
fi
bazel build --jobs="${KOLO_BUILD_JOBS:-2}" "${targets[@]}" ${KOLO_BAZEL_FLAGS:-}
bin=$(bazel info bazel-bin 2>/dev/null)
[[ ${#targets[@]} -eq 4 ]] && nfq=(--nfq_delay "$bin/tests/faults/nfq_delay")
export PATH="$PATH:/usr/sbin:/sbin"
exec python3 tests/faults/fault_matrix.py --kolod "$bin/daemon/kolod" \
  --rank "$bin/tests/faults/fault_rank" --attacker "$bin/tests/faults/fault_attacker" \
  "${nfq[@]}" "$@"
