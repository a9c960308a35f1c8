#!/usr/bin/env bash
# The main job: trains the reference MLP on Fashion-MNIST data-parallel over
# N ranks (default 2) through kolod. Extra arguments go to the trainer, e.g.
#   scripts/train.sh --epochs 5
# KOLO_NP sets the number of ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
bazel build //daemon:kolod //client/kolorun:kolorun //examples/fashion_mnist:fashion_mnist
exec bazel-bin/client/kolorun/kolorun -np "${KOLO_NP:-2}" -- \
  bazel-bin/examples/fashion_mnist/fashion_mnist "$@"
