#!/bin/bash
# compare_ray_train.sh: ResNet-50's gradient exchange as a Ray Train job,
# with Kolo's backend (kolo.ray.KoloConfig + kolo.torch) and with Ray Train's
# TorchTrainer (DDP over gloo), same workers and steps, in one run
# (examples/bench/ray_train_compare.py; it starts a local Ray cluster).
#
# usage: examples/bench/compare_ray_train.sh [--out DIR] [ray_train_compare.py flags]
#   --out DIR  keep the output in DIR/ray_train_compare.txt (default: a temporary directory)
#   e.g. --quick (5 timed steps, about a minute and a half on a 2-core VM),
#        --workers N, --steps N, --warmup N, --local (a compute-only row)
# Needs the Python SDK with ray[train] and torch (scripts/install_python.sh; .venv).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out=""
args=()
while (( $# > 0 )); do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) args+=("$1"); shift ;;
  esac
done
if [[ -z "${out}" ]]; then
  out="$(mktemp -d /tmp/kolo_compare_ray_train.XXXXXX)"
fi
mkdir -p "${out}"
log() { echo "compare_ray_train: $*" >&2; }

cd "${repo}"
python="${repo}/.venv/bin/python"
if [[ ! -x "${python}" ]] || ! "${python}" -c "import ray.train, torch" 2>/dev/null; then
  log "installing the Python SDK (scripts/install_python.sh)"
  scripts/install_python.sh >&2
fi
log "building kolod and koloctl"
bazel build //daemon:kolod //koloctl:koloctl >&2

log "Ray Train: KoloConfig, then TorchTrainer (gloo)"
"${python}" examples/bench/ray_train_compare.py "${args[@]+"${args[@]}"}" \
    | tee "${out}/ray_train_compare.txt"
log "output in ${out}/ray_train_compare.txt"
