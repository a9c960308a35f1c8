#!/usr/bin/env bash
# Runs Kolo's test suite (bazel test //..., less the gpu and fuzz tags) under
# AddressSanitizer + UndefinedBehaviorSanitizer (--config=asan) and/or
# ThreadSanitizer (--config=tsan); see docs/sanitizers.md. Prints one summary
# line per configuration and exits non-zero if any test fails or any target
# fails to build. The Python tests (python/tests) are not run here.
#
#   scripts/sanitize.sh [asan|tsan|all] [extra bazel test args]
#   scripts/sanitize.sh asan //common/... //daemon/plan/...
#
# Extra arguments that start with "//" replace the target pattern //...
# (all top-level folders); the others are added to the bazel command.
#
# Each configuration builds with clang into the same output paths as the gcc
# build, so each gets its own output base (by default one per checkout and
# configuration under ~/.cache/kolo-sanitize) and leaves the bazel-*
# symlinks of the checkout alone. $KOLO_BAZEL_STARTUP replaces the startup
# options (then "{config}" in it is replaced by the configuration's name).
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

which=${1:-all}
case "$which" in
  asan | tsan) configs=("$which") ;;
  all) configs=(asan tsan) ;;
  *)
    echo "usage: $0 [asan|tsan|all] [extra bazel test args]" >&2
    exit 2
    ;;
esac
shift $(($# > 0 ? 1 : 0))

targets=()
extra=()
for arg in "$@"; do
  if [[ "$arg" == //* || "$arg" == -//* ]]; then targets+=("$arg"); else extra+=("$arg"); fi
done
if [[ ${#targets[@]} -eq 0 ]]; then
  mapfile -t targets < <(scripts/top_packages.sh)
fi

base_root="${XDG_CACHE_HOME:-$HOME/.cache}/kolo-sanitize/$(pwd | cksum | cut -d' ' -f1)"

# The suppressions files travel by absolute path (tests run from their
# runfiles tree, the daemons they start from wherever they chdir to), added
# to the options .bazelrc sets for the configuration.
suppressions() {
  local var file opts
  case "$1" in
    asan) var=LSAN_OPTIONS file=lsan.supp ;;
    tsan) var=TSAN_OPTIONS file=tsan.supp ;;
  esac
  opts=$(sed -n "s/^test:$1 --test_env=$var=//p" .bazelrc | tail -1)
  echo "--test_env=$var=${opts:+$opts:}suppressions=$repo/tools/sanitizers/$file"
}

summary=()
failed=0
for config in "${configs[@]}"; do
  startup_line=${KOLO_BAZEL_STARTUP:---output_base=$base_root/{config}}
  read -r -a startup <<<"${startup_line//\{config\}/$config}"
  log=$(mktemp -t "kolo-sanitize-$config.XXXXXX")
  start=$SECONDS
  bazel "${startup[@]}" test --config="$config" --experimental_convenience_symlinks=ignore \
    "$(suppressions "$config")" "${extra[@]}" -- "${targets[@]}" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  took=$((SECONDS - start))
  # bazel's own summary lines: "//pkg:target  PASSED in 1.2s" and the like.
  passed=$(grep -cE '^//\S+\s+(\(cached\) )?PASSED' "$log")
  bad=$(grep -E '^//\S+\s+(FAILED|TIMEOUT|FLAKY|NO STATUS|FAILED TO BUILD|INCOMPLETE)' "$log" |
    awk '{print $1}' | tr '\n' ' ')
  if [[ $rc -ne 0 ]]; then
    failed=1
    summary+=("$config: FAILED (bazel exit $rc) in ${took} s; $passed targets passed; failed: ${bad:-none listed, see $log}")
  else
    summary+=("$config: ok in ${took} s; $passed targets passed")
    rm -f "$log"
  fi
done

printf 'sanitize.sh: %s\n' "${summary[@]}"
exit $failed
