#!/bin/bash
# compare_autotune.sh: the ResNet-50 gradient step (resnet50_grads: 161
# float32 tensors, 102 MB, averaged) with kolod's default fusion threshold
# and with HOROVOD_AUTOTUNE=1, in one run, on one kolod (2 ranks) and across
# 2 kolods (1 rank each; mutual TLS, UCX over tcp on loopback).
#
# Each autotuned run tunes during its untimed warm-up (1 warm-up sample,
# then --samples samples of 5 steps, then 6 that check the best against
# the start: 5 * (7 + samples) + 1 steps) and is
# timed after the tuner has kept its best; the default run gets the same
# warm-up. The two alternate --rounds times (which goes first alternates too). Prints every run's median step
# time and the threshold the tuner kept (from rank 0's HOROVOD_AUTOTUNE_LOG),
# then per setup the median over rounds and tuned / default.
#
# --start=B gives both runs HOROVOD_FUSION_THRESHOLD=B: the threshold the
# untuned run keeps and the tuned one starts from (default: kolod's, 64 MiB).
#
# usage: examples/bench/compare_autotune.sh [--rounds=K] [--samples=K] [--steps=K]
#            [--start=B]
set -euo pipefail
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
rounds=3
samples=10
steps=10
start=""
for a in "$@"; do
  case "$a" in
    --rounds=*) rounds="${a#*=}" ;;
    --samples=*) samples="${a#*=}" ;;
    --steps=*) steps="${a#*=}" ;;
    --start=*) start="${a#*=}" ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "compare_autotune.sh: unknown argument $a" >&2; exit 2 ;;
  esac
done
export UCX_TLS=tcp
cd "$repo"
bazel build //daemon:kolod //examples/bench:resnet50_grads //koloctl:koloctl >&2
dir=$(mktemp -d /tmp/kolo-autotune-XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; [[ -n "${KOLO_BENCH_KEEP:-}" ]] || rm -rf "$dir"; }
trap cleanup EXIT
# start_daemons, peer_of and run_ranks.
source "$repo/examples/bench/daemons_lib.sh"

# Warm-up, search, and 6 samples that check the best against the start.
warmup=$((5 * (1 + samples + 6) + 2))
grads=(bazel-bin/examples/bench/resnet50_grads --steps="$steps" --warmup="$warmup")
tune_env=(HOROVOD_AUTOTUNE=1 HOROVOD_AUTOTUNE_WARMUP_SAMPLES=1
          HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE=5 HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES="$samples")

run_one_node() {  # job  (2 ranks on kolod n0)
  local job=$1
  local rp=()
  for r in 0 1; do
    KOLO_SOCKET="$dir/n0.sock" KOLO_JOB_ID="$job" KOLO_JOB_TOKEN=$token KOLO_RANK=$r \
      KOLO_SIZE=2 KOLO_LOCAL_RANK=$r KOLO_LOCAL_SIZE=2 "${grads[@]}" >"$dir/$job.$r.out" 2>&1 &
    rp+=($!)
  done
  for p in "${rp[@]}"; do wait "$p"; done
  cat "$dir/$job.0.out"
}
# The median step (ms) of a resnet50_grads output: its table's first column.
median_ms() { awk '/^ +[0-9.]+ +[0-9.]+ +[0-9]+ / {print $1; exit}' "$1"; }
kept() { sed -n 's/^# kept fusion_threshold_bytes=//p' "$1" 2>/dev/null || true; }

for setup in one_node two_nodes; do
  if [[ $setup == one_node ]]; then start_daemons 1; else start_daemons 2; fi
  for round in $(seq 1 "$rounds"); do
    # Which runs first alternates, so that neither always finds a warm kolod.
    order="default tuned"
    (( round % 2 == 0 )) && order="tuned default"
    for mode in $order; do
      job="$setup.$mode.$round"
      log="$dir/$job.csv"
      extra=(KOLO_BENCH_MODE="$mode")
      [[ $mode == tuned ]] && extra=("${tune_env[@]}" HOROVOD_AUTOTUNE_LOG="$log")
      [[ -n $start ]] && extra+=(HOROVOD_FUSION_THRESHOLD="$start")
      if [[ $setup == one_node ]]; then
        (export "${extra[@]}"; run_one_node "$job") >"$dir/$job.txt"
      else
        (export "${extra[@]}"; run_ranks 2 "$job" "${grads[@]}") >"$dir/$job.txt"
      fi
      ms=$(median_ms "$dir/$job.txt")
      echo "$setup $mode round $round: step p50 ${ms:-n/a} ms${log:+, kept threshold $(kept "$log")}" |
        sed 's/, kept threshold $//'
      echo "$setup $mode $ms $(kept "$log")" >>"$dir/summary.txt"
      log=""
    done
  done
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  pids=()
  rm -rf "$dir/certs"
  sleep 0.5
done

started_at=${start:-"kolod's default"}
echo "== summary: median over $rounds rounds of each run's p50 step (ms), start $started_at"
python3 - "$dir/summary.txt" <<'PY'
import statistics, sys
runs = {}
kept = {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) < 3:
        continue
    runs.setdefault((f[0], f[1]), []).append(float(f[2]))
    if len(f) > 3:
        kept.setdefault(f[0], []).append(int(f[3]))
print(f"{'setup':>10} {'default':>9} {'tuned':>9} {'tuned/default':>14}  thresholds kept (MiB)")
for setup in ("one_node", "two_nodes"):
    d, t = runs.get((setup, "default")), runs.get((setup, "tuned"))
    if not d or not t:
        continue
    md, mt = statistics.median(d), statistics.median(t)
    mib = ", ".join(f"{k / 2**20:g}" for k in kept.get(setup, []))
    print(f"{setup:>10} {md:9.2f} {mt:9.2f} {mt / md:14.3f}  {mib}")
PY
