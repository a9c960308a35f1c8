#!/usr/bin/env bash
# Formats Kolo's C, C++ and CUDA sources with clang-format (.clang-format at
# the root). With --check, changes nothing and fails if a file would change.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=(-i)
[[ "${1:-}" == "--check" ]] && mode=(--dry-run --Werror)
fmt=$(command -v clang-format || command -v clang-format-14 || true)
if [[ -z "$fmt" ]]; then
  echo "format.sh: clang-format is not installed (apt-get install clang-format)" >&2
  exit 2
fi
git ls-files -z -- '*.h' '*.cc' '*.c' '*.cu' '*.cuh' ':!:third_party/**' |
  xargs -0 "$fmt" "${mode[@]}"
