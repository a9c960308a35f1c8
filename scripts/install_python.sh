#!/usr/bin/env bash
# Installs Kolo's Python SDK (kolo, kolo.tensorflow, kolo.torch) into a virtual
# environment: $KOLO_VENV, default .venv at the repository root.
#
#   scripts/install_python.sh && . .venv/bin/activate
#
# 1. Debian packages (scripts/install_deps.sh), then the venv with the pinned
#    Python packages of python/requirements.txt (TensorFlow and PyTorch among
#    them), a complete list installed with --no-deps (see its header).
# 2. Bazel builds kolo/_core.so (the extension over libkolo; Python's headers
#    and pybind11 are found by third_party/python) and kolod/kolorun.
# 3. g++ builds the TensorFlow op library against the venv's TensorFlow
#    (tf.sysconfig flags): it depends on where pip put TensorFlow, which Bazel
#    cannot know at analysis time, and it must compile against TensorFlow's own
#    Abseil and protobuf headers, not the system ones every Bazel target sees.
# 4. pip installs ./python (with both libraries) into the venv.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh

venv=${KOLO_VENV:-.venv}
base_python=${KOLO_PYTHON:-python3}
if [[ ! -x "$venv/bin/python" ]]; then
  "$base_python" -m venv "$venv"
fi
py="$venv/bin/python"
"$py" -m pip install -q --no-deps -r python/requirements.txt

bazel build //python:_core.so //daemon:kolod //client/kolorun:kolorun
if [[ ! -f bazel-bin/python/_core.so ]]; then
  echo "install_python: //python:_core.so was not built: Python's headers or pybind11 are missing" >&2
  exit 1
fi
install -m 0755 bazel-bin/python/_core.so python/kolo/_core.so

read -r -a tf_cflags <<<"$("$py" -c 'import tensorflow as tf; print(" ".join(tf.sysconfig.get_compile_flags()))' 2>/dev/null)"
read -r -a tf_lflags <<<"$("$py" -c 'import tensorflow as tf; print(" ".join(tf.sysconfig.get_link_flags()))' 2>/dev/null)"
tf_dir=$("$py" -c 'import os, tensorflow as tf; print(os.path.dirname(tf.__file__))' 2>/dev/null)
# TensorFlow's headers as system headers: their own warnings are not ours.
tf_cflags=("${tf_cflags[@]/#-I/-isystem}")
g++ -shared -fPIC -O2 -Wall -Wno-deprecated-declarations "${tf_cflags[@]}" -I. \
  python/src/tf_ops.cc -o python/kolo/tensorflow/_kolo_tf_ops.so \
  "${tf_lflags[@]}" -Wl,-rpath,"$tf_dir"

"$py" -m pip install -q --no-build-isolation --no-deps --force-reinstall ./python
rm -rf python/build python/*.egg-info
"$py" -c 'import kolo, kolo.tensorflow, kolo.torch; print("kolo", kolo.__version__, "installed in '"$venv"'")' 2>/dev/null
