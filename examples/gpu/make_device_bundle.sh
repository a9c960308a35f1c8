#!/usr/bin/env bash
# Kolo device bundle: builds the GPU programs here and packs them for a GPU
# machine that has the NVIDIA driver, CUDA and NCCL but neither Bazel nor the
# libraries Kolo builds against (gRPC, protobuf, abseil, spdlog, UCX,
# Highway), and no network to fetch them.
#
# Writes .device-bundle/ (ignored by git; carry it to the GPU machine):
#   kolo/...   the gpu-tagged test binaries, kolod, pack_bench and
#              device_allreduce_perf, at their Bazel paths (the tests find
#              daemon/kolod relative to this folder, as in Bazel's runfiles);
#   lib/       every shared library they need except the C/C++ runtime, the
#              CUDA driver and NCCL, which come from the GPU machine
#              (libnccl is 200+ MiB; the GPU machine's Python has one);
#   tests.txt  the test binaries, one per line;
#   include/   the Abseil headers: with libkolo in lib/ (as Bazel names it,
#              libclient_Slibkolo.so), what examples/gpu/build_python_core.sh
#              needs to compile kolo's _core.so there against that
#              machine's Python.
# Then examples/gpu/device_check.sh, run there, uses the bundle.
#
# Usage: examples/gpu/make_device_bundle.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
BAZEL="${BAZEL:-bazel}"
OUT=.device-bundle

mapfile -t TESTS < <("$BAZEL" query 'attr(tags, "gpu", tests(//...))' 2>/dev/null | sort)
if [ "${#TESTS[@]}" -eq 0 ]; then
  echo "no gpu-tagged tests found (is CUDA at /usr/local/cuda?)" >&2
  exit 1
fi
PROGRAMS=(//daemon:kolod //examples/gpu:pack_bench //examples/gpu:device_allreduce_perf
          //examples/gpu:ipc_event_bench //client/kolorun:kolorun)
"$BAZEL" build "${TESTS[@]}" "${PROGRAMS[@]}"

rm -rf "$OUT"
mkdir -p "$OUT/kolo" "$OUT/lib"
path_of() {  # //pkg/sub:name -> pkg/sub/name
  local label="${1#//}"
  echo "${label%%:*}/${label##*:}"
}
: >"$OUT/tests.txt"
for label in "${TESTS[@]}" "${PROGRAMS[@]}"; do
  rel=$(path_of "$label")
  mkdir -p "$OUT/kolo/$(dirname "$rel")"
  cp -L "bazel-bin/$rel" "$OUT/kolo/$rel"
  chmod u+w "$OUT/kolo/$rel"
  strip --strip-debug "$OUT/kolo/$rel"
done
for label in "${TESTS[@]}"; do path_of "$label" >>"$OUT/tests.txt"; done

# What the GPU machine provides itself: the C and C++ runtime, the CUDA
# driver, NCCL.
SYSTEM='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libgcc_s|libstdc\+\+|libcuda\.so|libnvidia|libnccl\.so)'
# libkolo's own libraries as Bazel links them dynamically, for
# build_python_core.sh (the programs above link them statically).
for lib in bazel-bin/_solib_k8/lib{client,common,proto}_*.so; do
  cp -L "$lib" "$OUT/lib/"
  chmod u+w "$OUT/lib/$(basename "$lib")"
done
for bin in $(find "$OUT/kolo" -type f) bazel-bin/_solib_k8/lib{client,common,proto}_*.so; do
  case "$bin" in
    "$OUT/kolo/"*) dir=$(dirname "bazel-bin/${bin#$OUT/kolo/}") ;;
    *) dir=$(dirname "$bin") ;;
  esac
  (cd "$dir" && ldd "$PWD/$(basename "$bin")") |
    awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  if [[ "$name" =~ $SYSTEM ]]; then continue; fi
  if [ ! -e "$OUT/lib/$name" ]; then
    cp -L "$path" "$OUT/lib/$name"
    chmod u+w "$OUT/lib/$name"
    strip --strip-unneeded "$OUT/lib/$name" 2>/dev/null || true
  fi
done

# With the Abseil headers, build_python_core.sh compiles _core.so on the GPU
# machine against lib/'s libkolo.
mkdir -p "$OUT/include"
cp -r /usr/include/absl "$OUT/include/"

# Every library must now resolve inside the bundle, but for the system's.
missing=0
for bin in $(find "$OUT/kolo" -type f) "$OUT"/lib/*; do
  while read -r name path; do
    if [[ "$name" =~ $SYSTEM ]]; then continue; fi
    case "$path" in
      "$PWD/$OUT/lib/"*) ;;
      *) echo "not bundled: $name ($path) for $bin" >&2; missing=1 ;;
    esac
  done < <(LD_LIBRARY_PATH="$PWD/$OUT/lib" ldd "$bin" 2>/dev/null |
           awk '$2 == "=>" {print $1, $3}')
done
[ "$missing" -eq 0 ] || exit 1
echo "device bundle: $(du -sh "$OUT" | cut -f1) in $OUT ($(wc -l <"$OUT/tests.txt") tests," \
     "$(ls "$OUT/lib" | wc -l) libraries)"
