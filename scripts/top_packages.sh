#!/usr/bin/env bash
# Prints //... spelled as the workspace's top-level folders that hold BUILD
# files ("//common/..." and so on), one per line. A build in another output
# base (scripts/sanitize.sh, scripts/fuzz.sh) uses this instead of //...:
# the ordinary build's bazel-* links point into a different output base,
# which it would otherwise walk into.
set -euo pipefail
cd "$(dirname "$0")/.."
for dir in */; do
  dir=${dir%/}
  [[ -L "$dir" ]] && continue
  if [[ -n $(find "$dir" \( -name BUILD -o -name BUILD.bazel \) -print -quit) ]]; then
    echo "//$dir/..."
  fi
done
