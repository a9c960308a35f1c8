#!/usr/bin/env bash
# The fault matrix (docs/reliability.md, "Fault matrix"): builds kolod and the
# fault rank, then runs every fault row against real processes and prints the
# table. Cross-node rows need root (network namespaces); without it they are
# skipped with the reason. Extra arguments go to tests/faults/fault_matrix.py
# (e.g. --single_node_only, --peer_timeout_s=10, --keep).
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build --jobs="${KOLO_BUILD_JOBS:-2}" //daemon:kolod //tests/faults:fault_rank \
  ${KOLO_BAZEL_FLAGS:-}
bin=$(bazel info bazel-bin 2>/dev/null)
export PATH="$PATH:/usr/sbin:/sbin"
exec python3 tests/faults/fault_matrix.py --kolod "$bin/daemon/kolod" \
  --rank "$bin/tests/faults/fault_rank" "$@"
