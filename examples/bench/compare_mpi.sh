#!/bin/bash
# compare_mpi.sh: Kolo's allreduce against MPI_Allreduce on this node, in one
# run: builds what it needs, runs allreduce_perf under kolorun and
# mpi_allreduce_perf under mpirun (shared-memory transport) with the same
# sweep, and prints per size the time and busbw of both and their ratio, then
# the 8-byte latency (p50/p99) of both.
#
# usage: examples/bench/compare_mpi.sh [-np N] [--min_bytes=B] [--max_bytes=B]
#            [--iters=K] [--warmup=K] [--latency_iters=K] [--copy] [--csv]
#            [--out DIR]
#   -np N       ranks for both (default 2)
#   --copy      Kolo tensors in process memory instead of SDK shared memory
#   --csv       print the joined table as CSV
#   --out DIR   keep the raw outputs in DIR (default: a temporary directory)
# Kolo uses the kolod on $KOLO_SOCKET (default /run/kolo/kolod.sock) when one
# answers, else kolorun starts a private one (bazel-bin/daemon/kolod).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
np=2
sweep_args=()
latency_args=()
kolo_args=()
csv=0
out=""
while (( $# > 0 )); do
  case "$1" in
    -np|--np) np="$2"; shift 2 ;;
    -np=*|--np=*) np="${1#*=}"; shift ;;
    --min_bytes=*|--max_bytes=*|--iters=*|--warmup=*) sweep_args+=("$1"); shift ;;
    --latency_iters=*) latency_args+=("$1"); shift ;;
    --copy) kolo_args+=("--copy"); shift ;;
    --csv) csv=1; shift ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "compare_mpi.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [[ -z "${out}" ]]; then
  out="$(mktemp -d /tmp/kolo_compare_mpi.XXXXXX)"
fi
mkdir -p "${out}"
log() { echo "compare_mpi: $*" >&2; }

# 1. Build.
cd "${repo}"
log "building kolorun, allreduce_perf and kolod with bazel"
bazel build //client/kolorun:kolorun //examples/bench:allreduce_perf >&2
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
mpicc -O2 -o "${out}/mpi_allreduce_perf" examples/bench/mpi_allreduce_perf.c -lm

kolorun=bazel-bin/client/kolorun/kolorun
perf=bazel-bin/examples/bench/allreduce_perf
# Oversubscription is allowed and binding is off, as for Kolo's ranks (which
# are not pinned); vader is OpenMPI's shared-memory transport.
mpirun_cmd=(mpirun --allow-run-as-root --oversubscribe --bind-to none
            --mca btl self,vader -np "${np}")

# 2. Run. Only rank 0 prints; kolorun prefixes its lines with "[0] ".
log "kolo sweep (${np} ranks)"
"${kolorun}" -np "${np}" -- "${perf}" --csv "${sweep_args[@]}" \
    "${kolo_args[@]}" >"${out}/kolo_sweep.txt"
log "mpi sweep (${np} ranks)"
"${mpirun_cmd[@]}" "${out}/mpi_allreduce_perf" --csv "${sweep_args[@]}" \
    >"${out}/mpi_sweep.txt"
log "kolo latency"
"${kolorun}" -np "${np}" -- "${perf}" --csv --latency "${latency_args[@]}" \
    "${kolo_args[@]}" >"${out}/kolo_latency.txt"
log "mpi latency"
"${mpirun_cmd[@]}" "${out}/mpi_allreduce_perf" --csv --latency \
    "${latency_args[@]}" >"${out}/mpi_latency.txt"
log "raw outputs in ${out}"

# 3. Join on size.
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
    wrong = int(row["wrong"])
    return "-" if wrong < 0 else ("OK" if wrong == 0 else "FAIL(%d)" % wrong)

kolo = {int(r["size_bytes"]): r for r in rows("kolo_sweep.txt")}
mpi = {int(r["size_bytes"]): r for r in rows("mpi_sweep.txt")}
sizes = sorted(set(kolo) & set(mpi))
if not sizes:
    sys.exit("compare_mpi: no common sizes in the two outputs")

table = []
for size in sizes:
    k, m = kolo[size], mpi[size]
    kt, mt = float(k["time_us"]), float(m["time_us"])
    # mpi time / kolo time equals kolo busbw / mpi busbw, and is defined for
    # one rank too. Above 1: Kolo is faster.
    ratio = mt / kt if kt > 0 else float("nan")
    table.append((size, kt, mt, float(k["busbw_gbps"]), float(m["busbw_gbps"]),
                  ratio, check(k), check(m)))

kl, ml = rows("kolo_latency.txt")[0], rows("mpi_latency.txt")[0]

if as_csv:
    print("size_bytes,kolo_time_us,mpi_time_us,kolo_busbw_gbps,mpi_busbw_gbps,"
          "kolo_over_mpi,kolo_check,mpi_check")
    for t in table:
        print("%d,%.3f,%.3f,%.4f,%.4f,%.3f,%s,%s" % t)
    print()
    print("latency_bytes,kolo_p50_us,kolo_p99_us,mpi_p50_us,mpi_p99_us")
    print("%s,%s,%s,%s,%s" % (kl["size_bytes"], kl["p50_us"], kl["p99_us"],
                              ml["p50_us"], ml["p99_us"]))
    sys.exit(0)

print("# allreduce, float32 sum, in place, %d ranks on one node" % np)
print("# kolo_over_mpi = mpi time / kolo time = kolo busbw / mpi busbw")
print("%12s %13s %13s %12s %12s %8s %8s %8s" % (
    "size(B)", "kolo_time(us)", "mpi_time(us)", "kolo_busbw", "mpi_busbw",
    "kolo/mpi", "kolo_ok", "mpi_ok"))
for t in table:
    print("%12d %13.2f %13.2f %12.3f %12.3f %8.2f %8s %8s" % t)
print()
print("# latency: %s B allreduce, %s timed calls" % (kl["size_bytes"], kl["iters"]))
print("%6s %10s %10s %10s" % ("", "p50(us)", "p99(us)", "check"))
print("%6s %10.2f %10.2f %10s" % ("kolo", float(kl["p50_us"]), float(kl["p99_us"]), check(kl)))
print("%6s %10.2f %10.2f %10s" % ("mpi", float(ml["p50_us"]), float(ml["p99_us"]), check(ml)))
PY
