#!/bin/bash
# The coordinator scale benchmark, small: every step plans every name, and
# once the cache is warm a member's Ready is a few dozen bytes.
set -euo pipefail
bench="$(dirname "$0")/coordinator_scale_bench"
[[ -x "${bench}" ]] || bench="daemon/coordinator/coordinator_scale_bench"
out="$("${bench}" --nodes=2,16 --steps=4 --batches=4 --csv)"
echo "${out}"
echo "${out}" | awk -F, '/^[0-9]/ {
  rows++
  if ($5 > 200) { print "warm Ready of " $5 " bytes per node"; bad = 1 }
  if ($4 <= $5) { print "cold Ready not larger than warm"; bad = 1 }
} END { if (rows != 2) { print "expected 2 rows, got " rows; bad = 1 }; exit bad }'
