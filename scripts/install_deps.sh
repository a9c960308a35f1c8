#!/usr/bin/env bash
# Installs the Debian packages Kolo builds, tests and runs with. Idempotent:
# does nothing when every package is already there.
set -euo pipefail

packages=(
  bazel-bootstrap g++ pkg-config python3
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev libfmt-dev libucx-dev libhwy-dev libssl-dev
  libgtest-dev libgmock-dev libbenchmark-dev zlib1g-dev
  dataset-fashion-mnist
  pybind11-dev python3-dev python3-venv
  python3-yaml
)
# kubectl validates the Kubernetes manifests offline (//deploy:kubectl_validate_test);
# Debian ships it as kubernetes-client. A kubectl already installed (another
# package) is kept: both install /usr/bin/kubectl.
if ! command -v kubectl >/dev/null 2>&1; then
  packages+=(kubernetes-client)
fi
# OpenMPI is only for the comparison benchmark; pass --with-mpi to get it.
if [[ "${1:-}" == "--with-mpi" ]]; then
  packages+=(openmpi-bin libopenmpi-dev)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if (( ${#missing[@]} == 0 )); then
  exit 0
fi
echo "installing: ${missing[*]}"
sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -q
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
