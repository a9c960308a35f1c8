#!/usr/bin/env bash
# Kolo device check: one script for the few minutes a GPU machine is lent.
#
#   1. builds the GPU targets (kernels, NCCL backend, SDK helpers, GPU tests,
#      the bench) with nvcc (sm_90 + compute_90 PTX) — or, where this
#      machine has no Bazel and no network (the lent GPU machines), uses the
#      bundle examples/gpu/make_device_bundle.sh made beforehand on a build
#      machine (.device-bundle/, carried along);
#   2. runs every gpu-tagged test of //kernels/cuda, //common/cuda, //daemon/backend/nccl,
#      //client/cuda and //tests/gpu;
#   3. runs examples/gpu:pack_bench: pack/unpack bandwidth as a fraction of
#      cudaMemcpy device-to-device, and a single-rank ncclAllReduce sweep;
#   4. starts a private kolod and runs examples/gpu:device_allreduce_perf:
#      two ranks on GPU 0 allreducing device tensors through kolod (CUDA IPC,
#      NCCL backend), in the allreduce_perf table format, printed after the
#      direct ncclAllReduce figures of step 3 for comparison. (The gpu tests
#      of step 2 include //tests/gpu:device_allreduce_test, the same path
#      checked element by element.) ipc_event_bench prints what CUDA's
#      interprocess events and a GPU context switch between two processes
#      cost; where the MPS control daemon exists, both run again under MPS;
#   5. kolo.torch with CUDA tensors and kolo's __cuda_array_interface__ path
#      (examples/gpu/python_device_check.py, 2 ranks under kolorun); with
#      the bundle, kolo's extension is first compiled there against that
#      machine's Python (examples/gpu/build_python_core.sh).
#
# Prints one "PASS <step>" or "FAIL <step>" line per step and a final
# summary; exits 0 only if every step passed. Each step has its own time
# limit so the whole run stays under 5 minutes. Logs go to $OUT (if set) or
# to a temporary folder, whose path is printed.
#
# Usage (from anywhere in the repository): examples/gpu/device_check.sh
# On a lent GPU machine: run examples/gpu/make_device_bundle.sh here first,
# then run this script there with .device-bundle carried along.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
LOGS="${OUT:-$(mktemp -d /tmp/kolo-device-check.XXXXXX)}"
mkdir -p "$LOGS"
START=$(date +%s)
FAILED=0
BAZEL="${BAZEL:-bazel}"

step() {  # step NAME TIMEOUT_S COMMAND...
  local name="$1" limit="$2"
  shift 2
  local t0=$(date +%s)
  echo "=== $name (limit ${limit}s): $*"
  timeout --kill-after=10 "$limit" "$@" >"$LOGS/$name.log" 2>&1
  local rc=$?
  local dt=$(( $(date +%s) - t0 ))
  if [ $rc -eq 0 ]; then
    echo "PASS $name (${dt}s)"
  else
    FAILED=1
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
      echo "FAIL $name: timed out after ${limit}s"
    else
      echo "FAIL $name: exit code $rc (${dt}s); last lines of $LOGS/$name.log:"
    fi
    tail -n 40 "$LOGS/$name.log" | sed 's/^/    /'
  fi
  return $rc
}

echo "kolo device check: $(date -u +%FT%TZ) on $(hostname)"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
else
  echo "FAIL gpu-present: nvidia-smi not found"
  FAILED=1
fi
[ -x /usr/local/cuda/bin/nvcc ] && /usr/local/cuda/bin/nvcc --version | tail -n 1

GPU_PACKAGES=(//kernels/cuda/... //common/cuda/... //daemon/backend/nccl/... //client/cuda/... //tests/gpu/...)
BUNDLE=.device-bundle

# Runs the programs under $BIN: kolod beside device_allreduce_perf, and
# pack_bench (pack/unpack vs cudaMemcpy D2D and a direct ncclAllReduce).
benches() {
  step pack-bench 40 "$BIN/examples/gpu/pack_bench"
  if [ -f "$LOGS/pack-bench.log" ]; then
    sed 's/^/    /' "$LOGS/pack-bench.log"
  fi
  step ipc-event-bench 40 "$BIN/examples/gpu/ipc_event_bench"
  if [ -f "$LOGS/ipc-event-bench.log" ]; then
    sed 's/^/    /' "$LOGS/ipc-event-bench.log"
  fi
  # Device tensors through kolod, beside the direct ncclAllReduce above.
  KOLOD_DIR=$(mktemp -d /tmp/kolo-device-kolod.XXXXXX)
  "$BIN/daemon/kolod" --socket "$KOLOD_DIR/kolod.sock" --status_address=127.0.0.1:0 --log_level=debug \
    --peer_address= --admin_token_file="$KOLOD_DIR/admin_token" >"$LOGS/kolod.log" 2>&1 &
  KOLOD_PID=$!
  for _ in $(seq 100); do [ -S "$KOLOD_DIR/kolod.sock" ] && break; sleep 0.1; done
  step device-allreduce-perf 60 "$BIN/examples/gpu/device_allreduce_perf" \
    --socket="$KOLOD_DIR/kolod.sock" --ranks=2 --max_bytes=$((256 << 20)) --iters=10 --warmup=3
  if [ -f "$LOGS/device-allreduce-perf.log" ]; then
    sed 's/^/    /' "$LOGS/device-allreduce-perf.log"
  fi
  # One rank: the same work as pack_bench's single-rank ncclAllReduce above,
  # through kolod (IPC mapping, events, the done event back to the stream).
  step device-allreduce-perf-1rank 60 "$BIN/examples/gpu/device_allreduce_perf" \
    --socket="$KOLOD_DIR/kolod.sock" --ranks=1 --max_bytes=$((256 << 20)) --iters=10 --warmup=3
  if [ -f "$LOGS/device-allreduce-perf-1rank.log" ]; then
    sed 's/^/    /' "$LOGS/device-allreduce-perf-1rank.log"
  fi
  kill "$KOLOD_PID" 2>/dev/null
  wait "$KOLOD_PID" 2>/dev/null
  rm -rf "$KOLOD_DIR"
  mps_compare
}

# Ranks and kolod are separate processes, so each collective switches the
# GPU between their contexts; the Multi-Process Service (MPS) shares one.
# Where the MPS control daemon exists, the IPC bench and the 2-rank
# allreduce run again under it.
mps_compare() {
  if ! command -v nvidia-cuda-mps-control >/dev/null; then
    echo "=== mps: nvidia-cuda-mps-control not found; not compared"
    return 0
  fi
  # A comparison, not a requirement: its steps do not fail the check.
  local failed_before=$FAILED dir
  dir=$(mktemp -d /tmp/kolo-mps.XXXXXX)
  export CUDA_MPS_PIPE_DIRECTORY="$dir/pipe" CUDA_MPS_LOG_DIRECTORY="$dir/log"
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if ! nvidia-cuda-mps-control -d; then
    echo "=== mps: the control daemon did not start; not compared"
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    return 0
  fi
  step mps-ipc-event-bench 40 "$BIN/examples/gpu/ipc_event_bench"
  sed 's/^/    /' "$LOGS/mps-ipc-event-bench.log"
  local kdir
  kdir=$(mktemp -d /tmp/kolo-device-kolod.XXXXXX)
  "$BIN/daemon/kolod" --socket "$kdir/kolod.sock" --status_address=127.0.0.1:0 \
    --peer_address= --admin_token_file="$kdir/admin_token" >"$LOGS/kolod-mps.log" 2>&1 &
  local pid=$!
  for _ in $(seq 100); do [ -S "$kdir/kolod.sock" ] && break; sleep 0.1; done
  step mps-device-allreduce-perf 60 "$BIN/examples/gpu/device_allreduce_perf" \
    --socket="$kdir/kolod.sock" --ranks=2 --max_bytes=$((256 << 20)) --iters=10 --warmup=3
  sed 's/^/    /' "$LOGS/mps-device-allreduce-perf.log"
  # One rank, out of place: the work of pack_bench's single-rank
  # ncclAllReduce (a copy), through kolod.
  step mps-device-allreduce-perf-1rank 60 "$BIN/examples/gpu/device_allreduce_perf" \
    --socket="$kdir/kolod.sock" --ranks=1 --out_of_place --max_bytes=$((1 << 30)) --iters=10 \
    --warmup=3
  sed 's/^/    /' "$LOGS/mps-device-allreduce-perf-1rank.log"
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  echo quit | nvidia-cuda-mps-control
  rm -rf "$kdir" "$dir"
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  FAILED=$failed_before
}

# kolo.torch with CUDA tensors and kolo's API with __cuda_array_interface__
# arrays: two ranks under kolorun (its private kolod) on GPU 0. `$1` is the
# Python that has torch and can import kolo (PYTHONPATH=python).
python_device() {
  local py="$1" dir
  if ! "$py" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    echo "=== python-device: $py has no PyTorch with CUDA; not run"
    return 0
  fi
  dir=$(mktemp -d /tmp/kolo-python-device.XXXXXX)
  step python-device 120 env PYTHONPATH="$PWD/python" "$BIN/client/kolorun/kolorun" \
    --kolod "$BIN/daemon/kolod" --socket "$dir/kolod.sock" -np 2 -- \
    "$py" examples/gpu/python_device_check.py
  sed 's/^/    /' "$LOGS/python-device.log" | grep -v '^    \[kolod\]' | tail -n 60
  rm -rf "$dir"
}

# A test without a usable GPU skips and still passes: catch that.
check_nothing_skipped() {
  local skipped
  skipped=$(grep -l '\[  SKIPPED \]' "$@" 2>/dev/null)
  if [ -n "$skipped" ]; then
    FAILED=1
    echo "FAIL gpu-tests-ran: tests skipped (no usable GPU?):"
    echo "$skipped" | sed 's/^/    /'
  else
    echo "PASS gpu-tests-ran: no test skipped"
  fi
}

if [ -d "$BUNDLE/kolo" ]; then
  # Built elsewhere by examples/gpu/make_device_bundle.sh: this machine has
  # the driver, CUDA and NCCL (its Python's), not Bazel or Kolo's libraries.
  echo "=== using the prebuilt bundle $BUNDLE"
  NCCL_LIB=$(python3 - <<'PY' 2>/dev/null
import glob, os, sys
for p in sys.path:
    for pattern in ("nvidia/nccl/lib/libnccl.so*", "torch/lib/libnccl.so*"):
        hits = glob.glob(os.path.join(p, pattern))
        if hits:
            print(os.path.dirname(hits[0]))
            raise SystemExit
PY
)
  export LD_LIBRARY_PATH="$PWD/$BUNDLE/lib${NCCL_LIB:+:$NCCL_LIB}:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "    NCCL from: ${NCCL_LIB:-the system}"
  BIN="$PWD/$BUNDLE/kolo"
  if step libraries 20 bash -c "! ldd '$BIN/daemon/kolod' '$BIN/tests/gpu/device_allreduce_test' | grep 'not found'"; then
    TEST_LOGS=()
    while read -r t; do
      [ -n "$t" ] || continue
      name="test-$(basename "$t")"
      step "$name" "${KOLO_DEVICE_TEST_LIMIT_S:-70}" bash -c "cd '$BIN' && './$t'"
      TEST_LOGS+=("$LOGS/$name.log")
    done <"$BUNDLE/tests.txt"
    check_nothing_skipped "${TEST_LOGS[@]}"
    benches
    # This machine's Python differs from the build machine's: compile
    # kolo's extension here against the bundle.
    if step python-core 120 examples/gpu/build_python_core.sh python3; then
      python_device python3
    fi
  else
    echo "FAIL gpu-tests: not run (libraries missing)"
  fi
elif step build 200 "$BAZEL" build "${GPU_PACKAGES[@]}" //examples/gpu:pack_bench \
    //examples/gpu:ipc_event_bench \
    //examples/gpu:device_allreduce_perf //daemon:kolod; then
  # The build step compiled everything, so this is test time only.
  step gpu-tests 75 "$BAZEL" test --config=gpu --test_output=errors --local_test_jobs=4 \
    --test_timeout=70 "${GPU_PACKAGES[@]}"
  if [ -f "$LOGS/gpu-tests.log" ]; then
    grep -E '^//.*(PASSED|FAILED|TIMEOUT|NO STATUS|SKIPPED)' "$LOGS/gpu-tests.log" | sed 's/^/    /'
  fi
  check_nothing_skipped bazel-testlogs/kernels/cuda/*/test.log \
    bazel-testlogs/common/cuda/*/test.log bazel-testlogs/daemon/backend/nccl/*/test.log bazel-testlogs/client/cuda/*/test.log \
    bazel-testlogs/tests/gpu/*/test.log
  BIN="$PWD/bazel-bin"
  benches
  if [ -f python/kolo/_core.so ] && [ -x .venv/bin/python ]; then
    python_device .venv/bin/python  # scripts/install_python.sh made both
  else
    echo "=== python-device: run scripts/install_python.sh first; not run"
  fi
else
  echo "FAIL gpu-tests: not run (build failed)"
  echo "FAIL pack-bench: not run (build failed)"
  echo "FAIL device-allreduce-perf: not run (build failed)"
fi

TOTAL=$(( $(date +%s) - START ))
if [ $FAILED -eq 0 ]; then
  echo "PASS device-check: all steps passed in ${TOTAL}s (logs: $LOGS)"
else
  echo "FAIL device-check: see the FAIL lines above (${TOTAL}s; logs: $LOGS)"
fi
exit $FAILED
