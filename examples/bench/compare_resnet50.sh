#!/bin/bash
# compare_resnet50.sh: ResNet-50's per-step gradient exchange (161 float32
# tensors, 102 MB, averaged) through Kolo and through MPI on this node, in one
# run: builds what it needs, runs resnet50_grads under kolorun (every tensor
# its own AllreduceAsync; kolod fuses) and mpi_resnet50_grads under mpirun
# (shared-memory transport) in two variants, one MPI_Allreduce per tensor and
# hand-fused 64 MiB buffers, then prints one table: step time, tensors per
# second, busbw and the ratio of each variant's step time to Kolo's.
#
# usage: examples/bench/compare_resnet50.sh [-np N] [--steps=K] [--warmup=K]
#            [--per_tensor=blocking|nonblocking] [--nocheck] [--csv]
#            [--out DIR]
#   -np N         ranks for both (default 2)
#   --steps=K     timed steps per variant (default 20); --warmup=K (default 3)
#   --per_tensor  how the MPI per-tensor variant issues its calls: blocking
#                 MPI_Allreduce one after another (default; the faster on one
#                 node), or every MPI_Iallreduce then one MPI_Waitall
#   --nocheck     skip the one verified step per variant
#   --csv         print the joined table as CSV
#   --out DIR     keep the raw outputs in DIR (default: a temporary directory)
# Kolo uses the kolod on $KOLO_SOCKET (default /run/kolo/kolod.sock) when one
# answers, else kolorun starts a private one (bazel-bin/daemon/kolod).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
np=2
steps=20
warmup=3
per_tensor=blocking
check=(--check)
csv=0
out=""
while (( $# > 0 )); do
  case "$1" in
    -np|--np) np="$2"; shift 2 ;;
    -np=*|--np=*) np="${1#*=}"; shift ;;
    --steps=*) steps="${1#*=}"; shift ;;
    --warmup=*) warmup="${1#*=}"; shift ;;
    --per_tensor=*) per_tensor="${1#*=}"; shift ;;
    --nocheck) check=(); shift ;;
    --csv) csv=1; shift ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "compare_resnet50.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [[ -z "${out}" ]]; then
  out="$(mktemp -d /tmp/kolo_compare_resnet50.XXXXXX)"
fi
mkdir -p "${out}"
log() { echo "compare_resnet50: $*" >&2; }

# 1. Build.
cd "${repo}"
log "building kolorun, resnet50_grads and kolod with bazel"
bazel build //client/kolorun:kolorun //examples/bench:resnet50_grads >&2
if ! bazel build //daemon:kolod >&2; then
  log "warning: //daemon:kolod did not build; relying on a running kolod"
fi
if ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; then
  log "mpicc/mpirun missing: installing openmpi-bin libopenmpi-dev"
  if [[ "$(id -u)" == 0 ]]; then
    apt-get install -y openmpi-bin libopenmpi-dev >&2
  else
    sudo apt-get install -y openmpi-bin libopenmpi-dev >&2
  fi
fi
mpicc -O2 -o "${out}/mpi_resnet50_grads" examples/bench/mpi_resnet50_grads.c -lm

kolorun=bazel-bin/client/kolorun/kolorun
grads=bazel-bin/examples/bench/resnet50_grads
# Oversubscription is allowed and binding is off, as for Kolo's ranks (which
# are not pinned); vader is OpenMPI's shared-memory transport.
mpirun_cmd=(mpirun --allow-run-as-root --oversubscribe --bind-to none
            --mca btl self,vader -np "${np}")

# 2. Run. The MPI program reduces the tensors the Kolo one prints, so the
# shape table has one source. Only rank 0 prints; kolorun prefixes "[0] ".
"${grads}" --print_shapes >"${out}/shapes.txt"
log "kolo (${np} ranks, ${steps} steps)"
"${kolorun}" -np "${np}" -- "${grads}" --csv --steps="${steps}" \
    --warmup="${warmup}" "${check[@]}" >"${out}/kolo.txt"
log "mpi per-tensor (${per_tensor}) and fused (${np} ranks, ${steps} steps)"
"${mpirun_cmd[@]}" "${out}/mpi_resnet50_grads" --csv --shapes="${out}/shapes.txt" \
    --steps="${steps}" --warmup="${warmup}" --per_tensor="${per_tensor}" \
    "${check[@]}" >"${out}/mpi.txt"
log "raw outputs in ${out}"

# 3. One table, Kolo first.
python3 - "${out}" "${np}" "${csv}" <<'PY'
import csv, os, re, sys

out, np, as_csv = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"

def rows(name):
    """CSV rows of a benchmark output, without rank prefixes and comments."""
    lines = []
    with open(os.path.join(out, name)) as f:
        for line in f:
            line = re.sub(r"^\[\d+\] ", "", line.rstrip("\n"))
            if line and not line.startswith("#"):
                lines.append(line)
    return list(csv.DictReader(lines))

def check(row):
    wrong = int(float(row["wrong"]))
    return "-" if wrong < 0 else ("OK" if wrong == 0 else "FAIL(%d)" % wrong)

table = rows("kolo.txt") + rows("mpi.txt")
if not table or table[0]["variant"] != "kolo":
    sys.exit("compare_resnet50: no Kolo row in %s/kolo.txt" % out)
kolo_ms = float(table[0]["median_ms"])

if as_csv:
    print("variant,median_ms,p90_ms,tensors_per_s,busbw_gbps,"
          "tensors_per_response,time_over_kolo,check")
for r in table:
    ms = float(r["median_ms"])
    # A variant's step time over Kolo's: above 1, Kolo is faster.
    ratio = ms / kolo_ms if kolo_ms > 0 else float("nan")
    r["ratio"] = ratio
    if as_csv:
        print("%s,%.3f,%.3f,%.1f,%.4f,%s,%.3f,%s" % (
            r["variant"], ms, float(r["p90_ms"]), float(r["tensors_per_s"]),
            float(r["busbw_gbps"]), r["tensors_per_response"], ratio, check(r)))
if as_csv:
    sys.exit(0)

t0 = table[0]
print("# ResNet-50 gradients: %s tensors, %s B float32 per step, average, "
      "%d ranks on one node, %s timed steps" % (t0["tensors"], t0["bytes"], np,
                                               t0["steps"]))
print("# step: per step the max over ranks, median over steps; busbw = "
      "bytes/step * 2(n-1)/n")
print("# tensors/resp: per fused kolod response (kolo), per MPI call (mpi)")
print("# vs_kolo = variant step time / kolo step time (above 1: Kolo faster)")
print("%-26s %10s %10s %11s %11s %12s %8s %8s" % (
    "variant", "step(ms)", "p90(ms)", "tensors/s", "busbw(GB/s)",
    "tensors/resp", "vs_kolo", "check"))
for r in table:
    print("%-26s %10.2f %10.2f %11.0f %11.3f %12.2f %8.2f %8s" % (
        r["variant"], float(r["median_ms"]), float(r["p90_ms"]),
        float(r["tensors_per_s"]), float(r["busbw_gbps"]),
        float(r["tensors_per_response"]), r["ratio"], check(r)))
PY
