#!/usr/bin/env bash
# Builds kolod and koloctl with Bazel and the kolod container image.
#   deploy/docker/build-image.sh [IMAGE_TAG]     (default kolod:dev)
# Run from anywhere inside the repository, on Debian 12 (the image's release).
set -euo pipefail
tag="${1:-kolod:dev}"
root="$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
cd "$root"
bazel build -c opt //daemon:kolod //koloctl:koloctl
install -D -m 0755 bazel-bin/daemon/kolod deploy/docker/bin/kolod
install -D -m 0755 bazel-bin/koloctl/koloctl deploy/docker/bin/koloctl
docker build -f deploy/docker/Dockerfile -t "$tag" deploy
echo "built image $tag"
