#!/usr/bin/env bash
# Compiles kolo's Python extension (python/kolo/_core.so) on a GPU machine
# whose Python differs from the build machine's, against the device bundle
# (examples/gpu/make_device_bundle.sh: libkolo in lib/ and the Abseil
# headers) and that machine's Python headers and pybind11. Needs g++.
#
# Usage: examples/gpu/build_python_core.sh [PYTHON]   (default python3)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
PY="${1:-python3}"
BUNDLE="$PWD/.device-bundle"
[ -f "$BUNDLE/lib/libclient_Slibkolo.so" ] || {
  echo "build_python_core: no libkolo in $BUNDLE/lib (run make_device_bundle.sh)" >&2
  exit 1
}
PY_INCLUDE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
PYBIND_INCLUDE="${PYBIND11_INCLUDE:-$("$PY" -c 'import pybind11; print(pybind11.get_include())')}"
# Bazel's libraries leave their dependencies to the final link: name the
# client's own (lib{client,common,proto}_S*, not the stand-ins of builds
# without CUDA, *_Unone) and every system library of the bundle.
LIBS=()
for lib in "$BUNDLE"/lib/*.so*; do
  name=$(basename "$lib")
  case "$name" in
    *_Unone.so) continue ;;
    libclient_S* | libcommon_S* | libproto_S*) ;;
    *_S*) continue ;;  # the daemon's and the tests' libraries
  esac
  LIBS+=("-l:$name")
done
SUFFIX="${KOLO_CORE_SUFFIX:-$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')}"
g++ -O2 -std=c++17 -shared -fPIC -fvisibility=hidden \
  -I. -Iclient/include -I"$BUNDLE/include" -I"$PY_INCLUDE" -I"$PYBIND_INCLUDE" \
  python/src/core_module.cc python/src/process_client.cc -o "python/kolo/_core$SUFFIX" \
  -L"$BUNDLE/lib" -Wl,--no-as-needed "${LIBS[@]}" \
  -Wl,-rpath,"$BUNDLE/lib" \
  -Wl,--version-script=python/src/core_module.lds -Wl,-z,now
echo "built python/kolo/_core$SUFFIX for $("$PY" --version 2>&1)"
