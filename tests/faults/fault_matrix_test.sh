#!/usr/bin/env bash
# The fault matrix's rows on one node, as a test: each fault must end with
# the named error, kolod must survive (or restart) and serve the next job,
# and nothing may leak. Seconds are reported, not judged (a loaded machine);
# scripts/fault_matrix.sh runs the whole matrix with its time bounds. Other
# tests run beside this one, so only /dev/shm entries named kolo* count.
set -euo pipefail
exec python3 tests/faults/fault_matrix.py --kolod daemon/kolod \
  --rank tests/faults/fault_rank --attacker tests/faults/fault_attacker --single_node_only \
  --no_timing --shm_prefix=kolo
