#!/usr/bin/env bash
# Checks that kolod's folders depend one way: each folder's libraries may use
# only folders below it in LAYERS (and its own subfolders). Reads the build
# graph with `bazel query`; prints every edge that points up and exits 1 if
# there is one. Run by scripts/test.sh; docs/internals.md explains the order.
#
#   tools/check_layers.sh
set -euo pipefail
cd "$(dirname "$0")/.."

# Top to bottom. A request flows session -> job -> negotiation -> exec ->
# backend; the executor implements the negotiator's StepRunner, so exec sits
# above negotiation. A negotiator across nodes talks over the wire to the
# coordinator, which plans with no knowledge of either. plan holds pure rules every layer above calls; core the
# types every layer shares; observe what the job and executor record.
LAYERS=(
  //daemon
  //daemon/status
  //daemon/session
  //daemon/job
  //daemon/exec
  //daemon/negotiation
  //daemon/wire
  //daemon/coordinator
  //daemon/elastic
  //daemon/backend
  //daemon/algorithms
  //daemon/transport
  //daemon/plan
  //daemon/observe
  //daemon/core
)

# A package's layer: the deepest LAYERS entry it is, or lies under
# (//daemon/backend/nccl is //daemon/backend).
layer_of() {
  local pkg=$1 best=-1 best_len=0 i
  for i in "${!LAYERS[@]}"; do
    if [[ ("$pkg" == "${LAYERS[$i]}" || "$pkg" == "${LAYERS[$i]}/"*) &&
          ${#LAYERS[$i]} -gt $best_len ]]; then
      best=$i
      best_len=${#LAYERS[$i]}
    fi
  done
  echo "$best"
}

edges=$(bazel query --noshow_progress \
  'let libs = kind("cc_library", //daemon/...) in deps($libs, 1) intersect //daemon/...' \
  --output=graph 2>/dev/null | sed -n 's/^ *"\(\/\/[^"]*\)" -> "\(\/\/[^"]*\)"$/\1 \2/p')
if [[ -z "$edges" ]]; then
  echo "check_layers: bazel query gave no edges" >&2
  exit 1
fi

bad=0
checked=0
while read -r from to; do
  from_pkg=${from%%:*}
  to_pkg=${to%%:*}
  [[ "$from_pkg" == "$to_pkg" ]] && continue
  f=$(layer_of "$from_pkg")
  t=$(layer_of "$to_pkg")
  if [[ $f -lt 0 || $t -lt 0 ]]; then
    echo "check_layers: $from_pkg or $to_pkg is in no layer (add it to LAYERS)"
    bad=1
    continue
  fi
  checked=$((checked + 1))
  if [[ $t -lt $f ]]; then
    echo "check_layers: $from depends on $to, a layer above it"
    bad=1
  fi
done <<<"$edges"

if [[ $bad -ne 0 ]]; then
  echo "check_layers: FAILED"
  exit 1
fi
echo "check_layers: $checked dependencies between daemon/ folders, all downward"
