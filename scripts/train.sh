#!/usr/bin/env bash
# The main job: trains the reference MLP on Fashion-MNIST data-parallel over
# N ranks (default 2) through kolod. Extra arguments go to the trainer, e.g.
#   scripts/train.sh --epochs 5
# KOLO_NP sets the number of ranks.
#
# The same model through the Python SDK, installed first into .venv
# (scripts/install_python.sh): the Keras program (kolo.tensorflow) or its
# PyTorch port (kolo.torch), e.g.
#   scripts/train.sh --keras --epochs 2
#   scripts/train.sh --torch --epochs 2
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  --keras | --torch)
    program=examples/keras_mnist.py
    [[ "$1" == --torch ]] && program=examples/torch_mnist.py
    shift
    scripts/install_python.sh
    exec bazel-bin/client/kolorun/kolorun -np "${KOLO_NP:-2}" -- \
      "${KOLO_VENV:-.venv}/bin/python" "$program" "$@"
    ;;
esac
scripts/install_deps.sh
bazel build //daemon:kolod //client/kolorun:kolorun //examples/fashion_mnist:fashion_mnist
exec bazel-bin/client/kolorun/kolorun -np "${KOLO_NP:-2}" -- \
  bazel-bin/examples/fashion_mnist/fashion_mnist "$@"
