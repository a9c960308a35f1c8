#!/usr/bin/env bash
# Builds Kolo's libFuzzer targets with --config=fuzz (clang, ASan, UBSan) and
# runs each for SECONDS_PER_TARGET (default 60) on a copy of its seed corpus,
# so the repository stays clean. Fails if any target crashes, leaks, times out
# or runs out of memory; prints one summary line per target. Findings are
# kept in $KOLO_FUZZ_OUT (default: a fresh temporary directory).
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET]
#   KOLO_FUZZ_TARGETS="//common:spsc_ring_fuzzer" scripts/fuzz.sh 10
#
# --config=fuzz builds with another compiler into the same output paths, so
# it gets its own output base (else the next ordinary build starts over):
# by default one per checkout under ~/.cache/kolo-fuzz; $KOLO_BAZEL_STARTUP
# replaces the startup options, $KOLO_BAZEL_FLAGS adds build flags (e.g.
# --jobs=2).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
[[ "$seconds" =~ ^[0-9]+$ ]] || { echo "usage: $0 [SECONDS_PER_TARGET]" >&2; exit 2; }
default_base="${XDG_CACHE_HOME:-$HOME/.cache}/kolo-fuzz/$(pwd | cksum | cut -d' ' -f1)"
read -r -a startup <<<"${KOLO_BAZEL_STARTUP:---output_base=$default_base}"
read -r -a flags <<<"${KOLO_BAZEL_FLAGS:-}"
bazel=(bazel "${startup[@]}")

if [[ -n "${KOLO_FUZZ_TARGETS:-}" ]]; then
  read -r -a targets <<<"$KOLO_FUZZ_TARGETS"
else
  mapfile -t packages < <(scripts/top_packages.sh)
  universe=$(printf '%s + ' "${packages[@]}")
  universe=${universe% + }
  mapfile -t targets < <("${bazel[@]}" query "attr(tags, \"\\bfuzz\\b\", kind(cc_binary, $universe))" 2>/dev/null)
fi
[[ ${#targets[@]} -gt 0 ]] || { echo "fuzz.sh: no fuzz targets found" >&2; exit 1; }

build_start=$SECONDS
# Its own output base must not take over the workspace's bazel-* links.
"${bazel[@]}" build --config=fuzz --experimental_convenience_symlinks=ignore "${flags[@]}" \
  "${targets[@]}"
bin=$("${bazel[@]}" info --config=fuzz "${flags[@]}" bazel-bin 2>/dev/null)
echo "fuzz.sh: built ${#targets[@]} targets in $((SECONDS - build_start)) s"

out=${KOLO_FUZZ_OUT:-$(mktemp -d -t kolo-fuzz.XXXXXX)}
mkdir -p "$out"
failed=0
for target in "${targets[@]}"; do
  pkg=${target#//}
  pkg=${pkg%%:*}
  name=${target##*:}
  work="$out/$name"
  mkdir -p "$work/corpus" "$work/artifacts"
  seeds="$pkg/testdata/fuzz/$name"
  [[ -d "$seeds" ]] && cp -r "$seeds/." "$work/corpus/"
  start=$SECONDS
  rc=0
  # -print_final_stats gives the execution count; ASAN_OPTIONS turns leak
  # detection on (the default under libFuzzer, stated for clarity).
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    "$bin/$pkg/$name" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
    -print_final_stats=1 -artifact_prefix="$work/artifacts/" "$work/corpus" \
    >"$work/log" 2>&1 || rc=$?
  took=$((SECONDS - start))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -1)
  cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$work/log" | tail -1 || true)
  corpus=$(find "$work/corpus" -type f | wc -l)
  rate=$((${execs:-0} / (took > 0 ? took : 1)))
  if [[ $rc -eq 0 ]]; then
    verdict=ok
  else
    verdict="FAILED (exit $rc; $(ls "$work/artifacts" | tr '\n' ' '))"
    failed=1
  fi
  printf '%-45s %s: %s execs in %d s (%d/s), %s, corpus %d; log %s\n' "$target" "$verdict" \
    "${execs:-?}" "$took" "$rate" "${cov:-cov: ?}" "$corpus" "$work/log"
done
exit $failed
