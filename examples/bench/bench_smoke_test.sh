#!/usr/bin/env bash
# The benchmarks in miniature, so that they cannot rot: allreduce_perf (a
# short sweep in SDK memory, in process memory, and the latency mode) and
# resnet50_grads (one checked step, with its fusion counters read from
# kolod's Status service) on 2 ranks through a private kolod. Asserts only
# that each run completes with every check OK; the figures of runs this
# short are printed, not judged.
set -euo pipefail
kolorun=client/kolorun/kolorun
kolod="$PWD/daemon/kolod"
bench=examples/bench
export KOLO_SOCKET="${TEST_TMPDIR:-/tmp}/none.sock"  # no system kolod: a private one

run() {
  local name="$1"
  shift
  local out
  if ! out="$("${kolorun}" --kolod "${kolod}" -np 2 -- "$@" 2>&1)"; then
    echo "FAIL ${name}: exited non-zero" >&2
    echo "${out}" | tail -20 >&2
    exit 1
  fi
  if echo "${out}" | grep -v '^\[kolod\]' | grep -q 'FAIL\|MISMATCH'; then
    echo "FAIL ${name}: a check failed" >&2
    echo "${out}" | tail -20 >&2
    exit 1
  fi
  echo "${out}" | grep -v '^\[kolod\]' | tail -3
  echo "ok ${name}"
}

run "allreduce_perf sweep" "${bench}/allreduce_perf" --min_bytes=8 --max_bytes=1048576 --iters=5 --warmup=1
run "allreduce_perf --copy" "${bench}/allreduce_perf" --copy --min_bytes=8 --max_bytes=1048576 --iters=5 --warmup=1
run "allreduce_perf --latency" "${bench}/allreduce_perf" --latency --latency_iters=200 --latency_warmup=20
run "resnet50_grads" "${bench}/resnet50_grads" --steps=1 --warmup=0 --check
