#!/bin/bash
# compare_framework.sh: the allreduce a TensorFlow program gets through
# kolo.tensorflow, next to the C++ SDK's on the same ranks, in one run: an
# 8-byte allreduce's latency (p50/p90/p99) and a --bytes allreduce's busbw,
# for the C++ SDK with SDK-allocated tensors (zero copy), the C++ SDK with
# tensors in the process's own memory (what a framework hands over), and
# kolo.tensorflow eagerly (examples/bench/tf_allreduce_perf.py). Then the
# ratios the speed goals name: TF latency, and TF busbw over the C++
# caller-memory busbw.
#
# usage: examples/bench/compare_framework.sh [-np N] [--bytes=B] [--out DIR]
#   -np N      ranks (default 2)
#   --bytes=B  bandwidth message size (default 67108864)
#   --out DIR  keep the raw outputs in DIR (default: a temporary directory)
# Needs the Python SDK with TensorFlow (scripts/install_python.sh; .venv).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
np=2
bytes=67108864
out=""
while (( $# > 0 )); do
  case "$1" in
    -np|--np) np="$2"; shift 2 ;;
    -np=*|--np=*) np="${1#*=}"; shift ;;
    --bytes=*) bytes="${1#*=}"; shift ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "compare_framework.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [[ -z "${out}" ]]; then
  out="$(mktemp -d /tmp/kolo_compare_framework.XXXXXX)"
fi
mkdir -p "${out}"
log() { echo "compare_framework: $*" >&2; }

cd "${repo}"
python="${repo}/.venv/bin/python"
if [[ ! -x "${python}" ]] || ! "${python}" -c "import kolo.tensorflow" 2>/dev/null; then
  log "installing the Python SDK (scripts/install_python.sh)"
  scripts/install_python.sh >&2
fi
log "building kolorun, kolod and allreduce_perf"
bazel build //client/kolorun:kolorun //daemon:kolod //examples/bench:allreduce_perf >&2

kolorun=bazel-bin/client/kolorun/kolorun
perf=bazel-bin/examples/bench/allreduce_perf
size_args=(--min_bytes="${bytes}" --max_bytes="${bytes}")

log "C++ SDK, SDK memory (${np} ranks)"
"${kolorun}" -np "${np}" -- "${perf}" --csv --latency >"${out}/sdk_latency.txt"
"${kolorun}" -np "${np}" -- "${perf}" --csv "${size_args[@]}" >"${out}/sdk_bw.txt"
log "C++ SDK, process memory"
"${kolorun}" -np "${np}" -- "${perf}" --csv --latency --copy >"${out}/copy_latency.txt"
"${kolorun}" -np "${np}" -- "${perf}" --csv --copy "${size_args[@]}" >"${out}/copy_bw.txt"
log "kolo.tensorflow, eager"
"${kolorun}" -np "${np}" -- "${python}" examples/bench/tf_allreduce_perf.py --csv \
    --bytes="${bytes}" >"${out}/tf.txt"
log "raw outputs in ${out}"

"${python}" - "${out}" "${np}" "${bytes}" <<'PY'
import csv, os, re, sys

out, np, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

def rows(name):
    lines = []
    with open(os.path.join(out, name)) as f:
        for line in f:
            line = re.sub(r"^\[\d+\] ", "", line.rstrip("\n"))
            if line and not line.startswith("#") and "," in line:
                lines.append(line)
    return list(csv.DictReader(lines))

def ok(wrong):
    return "OK" if int(float(wrong)) == 0 else "FAIL"

table = []
for label, lat, bw in (("C++ SDK, SDK memory", "sdk_latency.txt", "sdk_bw.txt"),
                       ("C++ SDK, process memory", "copy_latency.txt", "copy_bw.txt")):
    l, b = rows(lat)[0], rows(bw)[0]
    table.append((label, float(l["p50_us"]), float(l["p90_us"]), float(l["p99_us"]),
                  float(b["busbw_gbps"]), ok(l["wrong"]) if ok(b["wrong"]) == "OK" else "FAIL"))
t = rows("tf.txt")[0]
table.append(("kolo.tensorflow, eager", float(t["lat_p50_us"]), float(t["lat_p90_us"]),
              float(t["lat_p99_us"]), float(t["busbw_gbps"]), t["check"]))

print("# allreduce, float32 sum, %d ranks on one node; busbw at %d bytes" % (np, size))
print("%-26s %9s %9s %9s %12s %6s" % ("path", "p50(us)", "p90(us)", "p99(us)", "busbw(GB/s)",
                                      "check"))
for r in table:
    print("%-26s %9.2f %9.2f %9.2f %12.3f %6s" % r)
copy_bw, tf_bw = table[1][4], table[2][4]
print()
print("kolo.tensorflow 8-byte p50: %.1f us (goal <= 50)" % table[2][1])
print("kolo.tensorflow busbw / C++ process-memory busbw: %.2f (goal >= 0.80)"
      % (tf_bw / copy_bw if copy_bw > 0 else float("nan")))
print("kolo.tensorflow p50 / C++ SDK p50: %.1fx" % (table[2][1] / table[0][1]))
PY
