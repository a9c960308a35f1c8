#!/usr/bin/env bash
# soak.sh: does kolod hold steady under long load and many jobs?
#   phase 1: one kolod; two concurrent jobs of 3 ranks (tests/soak/soak_rank)
#     run mixed collectives (allreduce with every op, broadcast from varying
#     roots, allgather, reducescatter, alltoall; every dtype; 1 to 512 Ki elements, up to 4 MiB;
#     several in flight), every result checked, for --duration_s and at least
#     --min_collectives between them; then --short_jobs jobs of 3 ranks, one
#     after another, each attaching, running one collective and detaching.
#   phase 2: the same across two kolods on loopback (each job 2 + 1 ranks).
# kolod's resident memory, open fds and threads, and the /dev/shm entries, are
# sampled idle, at the start of the load (after a warm-up), its middle and end,
# after the jobs ended and after the short jobs, and every few seconds under
# load (the trace); the table is printed and the run fails if a figure moved
# beyond the tolerances printed beside it.
# Where it can (root), the run gets a private /dev/shm so that nothing else on
# the machine moves that count.
#
# usage: scripts/soak.sh [--duration_s=600] [--min_collectives=100000]
#          [--short_jobs=1000] [--phases=1,2] [--inflight=8]
#          [--max_elements=524288] [--bin_dir=DIR] [--report_only] [--keep]
#          [--trace_every_s=N]
#   --bin_dir: take daemon/kolod, koloctl/koloctl and tests/soak/soak_rank from
#   DIR instead of building them with bazel.
#   --report_only: print the table and tolerances but fail only on a failed
#   collective or job (for runs too short for the figures to mean anything).
#   --keep: keep the run's folder (the daemons' logs) and print where it is.
#   --trace_every_s: sample every N seconds under load (default: 30 samples
#   over the load, at least 10 s apart) and print the series (seconds into
#   the load, then each kolod's RssAnon, fds, threads).
set -euo pipefail
duration_s=${SOAK_DURATION_S:-600}
min_collectives=${SOAK_MIN_COLLECTIVES:-100000}
short_jobs=${SOAK_SHORT_JOBS:-1000}
phases=${SOAK_PHASES:-1,2}
inflight=8
max_elements=524288
bin_dir=""
report_only=""
keep=""
trace_every_s=""
for a in "$@"; do
  case "$a" in
    --duration_s=*) duration_s="${a#*=}" ;;
    --min_collectives=*) min_collectives="${a#*=}" ;;
    --short_jobs=*) short_jobs="${a#*=}" ;;
    --phases=*) phases="${a#*=}" ;;
    --inflight=*) inflight="${a#*=}" ;;
    --max_elements=*) max_elements="${a#*=}" ;;
    --bin_dir=*) bin_dir="${a#*=}" ;;
    --report_only) report_only=1 ;;
    --trace_every_s=*) trace_every_s="${a#*=}" ;;
    --keep) keep=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "soak.sh: unknown argument $a" >&2; exit 2 ;;
  esac
done

[[ -n "$trace_every_s" ]] || trace_every_s=$((duration_s / 30 > 10 ? duration_s / 30 : 10))

# Tolerances. VmRSS counts the pages of the clients' segments kolod has
# touched, which belong to the jobs and go when they detach; kolod's own
# memory is RssAnon. Under load it is judged on the trace, the last third of
# the load against the middle one (in the first the pools still fill):
# it moves up and down within a band (an hour of load, sampled every two
# minutes, stayed between 28 and 39 MiB without a trend: the allocator's
# caches and the sizes in flight at the moment of the sample), so one sample
# against another says little. A leak raises the last third above the
# middle one: its median may be at most 4 MiB + 5% above the middle third's,
# and its peak at most 8 MiB + 5% above the middle third's peak. fds and threads (start
# -> middle -> end) may differ by the few a connection being set up or torn
# down holds. Idle (after the jobs, after the short jobs): fds never above
# idle (fewer is not a leak; the two-daemon soak has ended one below idle);
# threads at most 4 above idle, and none more after the short jobs than after
# the jobs (gRPC keeps a few of the threads a burst made: its timer threads
# and its servers' idle pollers, one to three more than idle after the load,
# the same after 60 s, 300 s and an hour of it and after 1,000 more jobs; a
# thread per job would add hundreds). RssAnon after the jobs at most the
# higher of idle + 8 MiB + 5% and the peak under load: the allocator may keep
# what the load needed (kolod trims its heap when a job ends; what stays are
# arena pages still holding some live block) but nothing beyond it. After the short jobs VmRSS within
# 8 MiB of after the jobs (1,000 jobs leaking 8 KiB each would exceed it).
# /dev/shm: never an entry more than idle.
rss_tol_kb=8192
median_tol_kb=4096
rss_tol_pct=5
busy_fd_tol=4
idle_thread_tol=4

if [[ -z "$bin_dir" ]]; then
  repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  cd "$repo"
  bazel build --jobs=2 //daemon:kolod //koloctl //tests/soak:soak_rank >&2
  bin_dir="$repo/bazel-bin"
fi
bin_dir="$(cd "$bin_dir" && pwd)"
kolod="$bin_dir/daemon/kolod"
koloctl="$bin_dir/koloctl/koloctl"
soak_rank="$bin_dir/tests/soak/soak_rank"

# A private /dev/shm: re-run inside a mount namespace with its own tmpfs
# (SOAK_PRIVATE_SHM=0 runs without one).
if [[ -z "${SOAK_PRIVATE_SHM:-}" && $(id -u) -eq 0 ]] && unshare -m true 2>/dev/null; then
  exec unshare -m bash -c \
    'if mount -t tmpfs -o size=64m,mode=1777 soak-shm /dev/shm; then export SOAK_PRIVATE_SHM=1;
     else export SOAK_PRIVATE_SHM=0; fi; exec "$@"' soak "$0" \
    --duration_s="$duration_s" --min_collectives="$min_collectives" --short_jobs="$short_jobs" \
    --phases="$phases" --inflight="$inflight" --max_elements="$max_elements" \
    --bin_dir="$bin_dir" --trace_every_s="$trace_every_s" ${report_only:+--report_only} \
    ${keep:+--keep}
fi
shm_note="private /dev/shm"
[[ "${SOAK_PRIVATE_SHM:-}" == 1 ]] || shm_note="/dev/shm shared with the rest of the machine"

# A job token of 128 random bits, as kolod wants.
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
dir=$(mktemp -d "${TMPDIR:-/tmp}/kolo-soak-XXXXXX")
: >"$dir/trace"
pids=()
cleanup() {
  # TERM first: a rank's `timeout` passes it on to the rank.
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  sleep 0.2
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  if [[ -n "$keep" ]]; then echo "soak: logs kept in $dir"; else rm -rf "$dir"; fi
}
trap cleanup EXIT
# Every rank ends by then (the load ranks stop themselves well before).
rank_limit_s=$((2 * duration_s + 300))
failed=0
fail() { echo "FAIL: $*"; failed=1; }

start_daemon() {  # name extra-flags...
  local name=$1; shift
  "$kolod" --socket "$dir/$name.sock" --status_address= --log_level="${SOAK_LOG_LEVEL:-warn}" "$@" \
    >"$dir/$name.log" 2>&1 &
  pids+=($!)
  eval "pid_$name=$!"
  for _ in $(seq 1 400); do
    [[ -S "$dir/$name.sock" ]] && return 0
    sleep 0.05
  done
  echo "FAIL: kolod $name did not start"; cat "$dir/$name.log"; exit 1
}
peer_of() {  # name -> the peer address (host:port) that daemon serves
  local out=""
  for _ in $(seq 1 50); do
    out=$("$koloctl" --socket "$dir/$1.sock" --json status 2>/dev/null) && break
    sleep 0.1
  done
  grep -o '"peer_address": *"[^"]*"' <<<"$out" | head -1 | sed 's/.*"\([^"]*\)"$/\1/'
}

# start_rank node job rank local_rank local_size coordinator log soak_rank-flags...
start_rank() {
  local node=$1 job=$2 rank=$3 local_rank=$4 local_size=$5 coordinator=$6 log=$7
  shift 7
  KOLO_SOCKET="$dir/$node.sock" KOLO_JOB_ID="$job" KOLO_JOB_TOKEN="$token" KOLO_RANK="$rank" \
    KOLO_SIZE=3 KOLO_LOCAL_RANK="$local_rank" KOLO_LOCAL_SIZE="$local_size" \
    KOLO_COORDINATOR="$coordinator" timeout "$rank_limit_s" "$soak_rank" "$@" >"$log" 2>&1 &
  rank_pids+=($!)
  pids+=($!)
}
# place_job job nodes... : starts the job's 3 ranks, rank r on node placement[r].
place_job() {
  local job=$1 log=$2; shift 2
  local flags=("${@:4}") nodes=("$1" "$2" "$3")
  for r in 0 1 2; do
    local n=${nodes[$r]} local_rank=0 local_size=0
    for q in 0 1 2; do
      [[ ${nodes[$q]} == "$n" ]] || continue
      [[ $q -lt $r ]] && local_rank=$((local_rank + 1))
      local_size=$((local_size + 1))
    done
    local coordinator=""
    [[ ${nodes[0]} != "${nodes[2]}" || ${nodes[0]} != "${nodes[1]}" ]] &&
      coordinator=$(eval echo "\$peer_${nodes[0]}")
    start_rank "$n" "$job" "$r" "$local_rank" "$local_size" "$coordinator" "$log.$r" "${flags[@]}"
  done
}

sample() {  # phase label daemon-names...
  local phase=$1 label=$2; shift 2
  local shm; shm=$(find /dev/shm -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
  for name in "$@"; do
    local pid; pid=$(eval echo "\$pid_$name")
    local rss; rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status")
    local anon; anon=$(awk '/^RssAnon/ {print $2}' "/proc/$pid/status")
    local fds; fds=$(find "/proc/$pid/fd" -mindepth 1 -maxdepth 1 | wc -l)
    local threads; threads=$(find "/proc/$pid/task" -mindepth 1 -maxdepth 1 | wc -l)
    echo "$phase $label $name $rss $anon $fds $threads $shm" >>"$dir/samples"
    # Thread names, for telling which threads came or went.
    cat /proc/"$pid"/task/*/comm 2>/dev/null | sort | uniq -c >"$dir/threads.$phase.$label.$name"
  done
}

# Waits (up to 10 s) until no daemon holds more descriptors than at idle.
settle_fds() {  # phase daemon-names...
  local phase=$1; shift
  for _ in $(seq 1 100); do
    local over=0
    for name in "$@"; do
      local pid; pid=$(eval echo "\$pid_$name")
      local idle; idle=$(awk -v p="$phase" -v n="$name" '$1 == p && $2 == "idle" && $3 == n {print $6}' \
        "$dir/samples")
      local now; now=$(find "/proc/$pid/fd" -mindepth 1 -maxdepth 1 | wc -l)
      [[ $now -le ${idle:-0} ]] || over=1
    done
    [[ $over -eq 0 ]] && return 0
    sleep 0.1
  done
}

# One line of the trace: seconds into the load, then per kolod RssAnon KiB,
# fds and threads.
trace_line() {  # phase seconds daemon-names...
  local phase=$1 at=$2; shift 2
  local line="$phase $at"
  for name in "$@"; do
    local pid; pid=$(eval echo "\$pid_$name")
    line="$line $name $(awk '/^RssAnon/ {print $2}' "/proc/$pid/status")"
    line="$line $(find "/proc/$pid/fd" -mindepth 1 -maxdepth 1 | wc -l)"
    line="$line $(find "/proc/$pid/task" -mindepth 1 -maxdepth 1 | wc -l)"
  done
  echo "$line" >>"$dir/trace"
}

# Sleeps `seconds` while the load runs; 1 (early) if a rank has ended. With
# --trace_every_s, samples the daemons (trace_daemons) on the way.
watch_load() {  # seconds
  for _ in $(seq 1 "$1"); do
    for p in "${rank_pids[@]}"; do kill -0 "$p" 2>/dev/null || return 1; done
    sleep 1
    if [[ $trace_every_s -gt 0 ]]; then
      local at=$(($(date +%s) - load_t0))
      if [[ $at -ge $next_trace ]]; then
        trace_line "$trace_phase" "$at" "${trace_daemons[@]}"
        next_trace=$((next_trace + trace_every_s))
      fi
    fi
  done
}
# The exit codes of rank_pids; prints the logs of those that failed.
reap_ranks() {  # what logs...
  local what=$1 bad=0; shift
  local logs=("$@")
  for i in "${!rank_pids[@]}"; do
    if ! wait "${rank_pids[$i]}"; then
      bad=1
      echo "--- $what: ${logs[$i]##*/} failed:"; tail -20 "${logs[$i]}"
    fi
  done
  return $bad
}

# run_short_jobs phase count label nodes(3): jobs one after another.
run_short_jobs() {
  local phase=$1 count=$2 label=$3; shift 3
  local log="$dir/p$phase-$label"
  short_done=0
  for j in $(seq 1 "$count"); do
    rank_pids=()
    place_job "p$phase-$label-$j" "$log" "$@" --mode=short --index="$j" --seed=3
    reap_ranks "phase $phase short job $j" "$log.0" "$log.1" "$log.2" || return 1
    short_done=$j
  done
}

# run_phase phase "nodes of job a" "nodes of job b" daemon-names...
run_phase() {
  local phase=$1 place_a=($2) place_b=($3)
  shift 3
  local daemons=("$@")
  echo "== phase $phase: ${#daemons[@]} kolod, jobs a (${place_a[*]}) and b (${place_b[*]})"
  # The idle baseline: after one job, which starts what kolod starts lazily.
  run_short_jobs "$phase" 1 first "${place_a[@]}" || { fail "phase $phase: first job"; return; }
  sample "$phase" idle "${daemons[@]}"
  rank_pids=()
  local flags=(--mode=load --duration_s="$duration_s" --min_collectives=$(((min_collectives + 1) / 2))
               --inflight="$inflight" --max_elements="$max_elements" --progress_s=60)
  place_job "p$phase-a" "$dir/p$phase-a" "${place_a[@]}" --seed=1 "${flags[@]}"
  place_job "p$phase-b" "$dir/p$phase-b" "${place_b[@]}" --seed=2 "${flags[@]}"
  local logs=("$dir/p$phase-a".{0,1,2} "$dir/p$phase-b".{0,1,2})
  for _ in $(seq 1 3000); do
    grep -qs warm "$dir/p$phase-a.0" && grep -qs warm "$dir/p$phase-b.0" && break
    sleep 0.1
  done
  local t0; t0=$(date +%s)
  load_t0=$t0 next_trace=0 trace_phase=$phase trace_daemons=("${daemons[@]}")
  sample "$phase" start "${daemons[@]}"
  if watch_load $((duration_s / 2)); then
    sample "$phase" middle "${daemons[@]}"
    if watch_load $((duration_s - duration_s / 10 - ($(date +%s) - t0))); then
      sample "$phase" end "${daemons[@]}"
    fi
  fi
  reap_ranks "phase $phase load" "${logs[@]}" || fail "phase $phase: a load rank failed"
  local total=0
  for job in a b; do
    local line; line=$(grep "total:" "$dir/p$phase-$job.0" || true)
    echo "job $job: $line"
    total=$((total + $(awk '{print $4}' <<<"${line:-x x x 0}")))
  done
  echo "phase $phase: $total collectives checked in the two jobs"
  [[ $total -ge $min_collectives ]] || fail "phase $phase: $total collectives, want $min_collectives"
  # The ranks have exited; kolod tears their sessions down as it notices.
  # Give that up to 10 s (a descriptor still open after it is a leak).
  settle_fds "$phase" "${daemons[@]}"
  sample "$phase" after-jobs "${daemons[@]}"
  local s0; s0=$(date +%s)
  run_short_jobs "$phase" "$short_jobs" short "${place_a[@]}" ||
    fail "phase $phase: a short job failed"
  echo "phase $phase: $short_done of $short_jobs short jobs completed in $(($(date +%s) - s0)) s"
  sample "$phase" after-short "${daemons[@]}"
  for name in "${daemons[@]}"; do
    [[ -d "/proc/$(eval echo "\$pid_$name")" ]] || fail "phase $phase: kolod $name died"
  done
}

stop_daemons() {
  for name in "$@"; do
    local pid; pid=$(eval echo "\$pid_$name")
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
}

echo "soak: --duration_s=$duration_s per phase, >= $min_collectives collectives per phase," \
  "$short_jobs short jobs, $inflight in flight, up to $max_elements elements; $shm_note"
if [[ ",$phases," == *,1,* ]]; then
  start_daemon n0 --peer_address=
  run_phase 1 "n0 n0 n0" "n0 n0 n0" n0
  stop_daemons n0
fi
if [[ ",$phases," == *,2,* ]]; then
  export UCX_TLS=tcp
  # A generous peer timeout: on a loaded machine a daemon may be starved of
  # the CPU for seconds, which is not what this run looks for.
  start_daemon n0 --peer_address=127.0.0.1:0 --peer_plaintext --node_name=n0 --peer_timeout_s=60
  start_daemon n1 --peer_address=127.0.0.1:0 --peer_plaintext --node_name=n1 --peer_timeout_s=60
  peer_n0=$(peer_of n0)
  peer_n1=$(peer_of n1)
  [[ -n "$peer_n0" && -n "$peer_n1" ]] || { echo "FAIL: no peer address"; exit 1; }
  run_phase 2 "n0 n0 n1" "n1 n1 n0" n0 n1
  stop_daemons n0 n1
fi

if [[ $trace_every_s -gt 0 && -f "$dir/trace" ]]; then
  echo "trace under load (phase, seconds, then per kolod: name RssAnon-KiB fds threads):"
  cat "$dir/trace"
fi

# The table, then the tolerances checked against it.
echo
printf '%-6s %-12s %-7s %12s %12s %6s %8s %9s\n' phase sample kolod "VmRSS KiB" "RssAnon KiB" \
  fds threads /dev/shm
while read -r phase label name rss anon fds threads shm; do
  printf '%-6s %-12s %-7s %12s %12s %6s %8s %9s\n' "$phase" "$label" "$name" "$rss" "$anon" \
    "$fds" "$threads" "$shm"
done <"$dir/samples"
echo
echo "tolerances: under load (trace, last third vs middle third): RssAnon median +${median_tol_kb} KiB" \
  "+ ${rss_tol_pct}%, peak +${rss_tol_kb} KiB + ${rss_tol_pct}%; (middle, end vs start):" \
  "fds and threads +-${busy_fd_tol}; after-jobs: RssAnon within +${rss_tol_kb} KiB +" \
  "${rss_tol_pct}% of idle or the peak under load; after-short: VmRSS within +${rss_tol_kb} KiB" \
  "of after-jobs;" \
  "both: fds never above idle, threads at most idle + ${idle_thread_tol}; threads after-short at" \
  "most after-jobs; /dev/shm never above idle"
if [[ -n "$report_only" ]]; then
  echo "(--report_only: the tolerances are not checked)"
elif ! awk -v tol="$rss_tol_kb" -v mtol="$median_tol_kb" -v pct="$rss_tol_pct" \
    -v busy="$busy_fd_tol" -v idle_t="$idle_thread_tol" -v third="$((duration_s / 3))" '
  function abs(x) { return x < 0 ? -x : x }
  function bad(msg) { print "FAIL: " msg; failed = 1 }
  function median(arr, n,   i, j, t) {  # sorts arr[1..n] in place
    for (i = 2; i <= n; ++i)
      for (j = i; j > 1 && arr[j - 1] > arr[j]; --j) { t = arr[j]; arr[j] = arr[j - 1]; arr[j - 1] = t }
    return n % 2 ? arr[(n + 1) / 2] : (arr[n / 2] + arr[n / 2 + 1]) / 2
  }
  FILENAME ~ /trace$/ {
    # phase seconds, then name anon fds threads per kolod
    for (f = 3; f + 3 <= NF; f += 4) {
      if ($2 < third) continue  # the pools still fill: a warm-up, not a trend
      k = "phase " $1 " " $f; h = $2 < 2 * third ? 1 : 2
      v = ++nt[k, h]; tr[k, h, v] = $(f + 1); traced[k] = 1
      if ($(f + 1) > peak[k, h]) peak[k, h] = $(f + 1)
    }
    next
  }
  { k = "phase " $1 " " $3; rss[k, $2] = $4; anon[k, $2] = $5; fds[k, $2] = $6
    thr[k, $2] = $7; shm[k, $2] = $8; seen[k] = 1; has[k, $2] = 1 }
  END {
    for (k in traced) {
      if (nt[k, 1] < 2 || nt[k, 2] < 2) continue  # too short a load to judge
      for (h = 1; h <= 2; ++h) {
        delete one
        for (v = 1; v <= nt[k, h]; ++v) one[v] = tr[k, h, v]
        med[h] = median(one, nt[k, h])
      }
      if (med[2] > med[1] + mtol + med[1] * pct / 100)
        bad(k ": RssAnon median of the last third " med[2] " KiB > middle third " med[1] " + " mtol)
      if (peak[k, 2] > peak[k, 1] + tol + peak[k, 1] * pct / 100)
        bad(k ": RssAnon peak of the last third " peak[k, 2] " KiB > middle third " peak[k, 1] " + " tol)
      printf "%s: RssAnon under load, middle third median %d peak %d KiB, last third median %d peak %d KiB\n", k, med[1], peak[k, 1], med[2], peak[k, 2]
    }
    for (k in seen) {
      for (i = 1; i <= 2; ++i) {
        s = i == 1 ? "middle" : "end"
        if (!has[k, s]) continue
        if (abs(fds[k, s] - fds[k, "start"]) > busy)
          bad(k ": fds " s " " fds[k, s] " vs start " fds[k, "start"])
        if (abs(thr[k, s] - thr[k, "start"]) > busy)
          bad(k ": threads " s " " thr[k, s] " vs start " thr[k, "start"])
      }
      # After the load, kolod may keep what the load needed (its allocator
      # keeps the high-water mark) but nothing beyond it.
      hw = peak[k, 1] > peak[k, 2] ? peak[k, 1] : peak[k, 2]
      for (s2 = 1; s2 <= 3; ++s2) {
        s = s2 == 1 ? "start" : s2 == 2 ? "middle" : "end"
        if (has[k, s] && anon[k, s] > hw) hw = anon[k, s]
      }
      limit = anon[k, "idle"] + tol + anon[k, "idle"] * pct / 100
      if (hw > limit) limit = hw
      if (has[k, "after-jobs"] && anon[k, "after-jobs"] > limit)
        bad(k ": RssAnon after-jobs " anon[k, "after-jobs"] " KiB > " int(limit))
      if (has[k, "after-short"] && rss[k, "after-short"] > rss[k, "after-jobs"] + tol)
        bad(k ": VmRSS after-short " rss[k, "after-short"] " KiB > after-jobs + " tol)
      for (i = 1; i <= 2; ++i) {
        s = i == 1 ? "after-jobs" : "after-short"
        if (!has[k, s]) continue
        if (fds[k, s] > fds[k, "idle"]) bad(k ": fds " s " " fds[k, s] " > idle " fds[k, "idle"])
        if (thr[k, s] > thr[k, "idle"] + idle_t)
          bad(k ": threads " s " " thr[k, s] " > idle " thr[k, "idle"] " + " idle_t)
      }
      if (has[k, "after-short"] && thr[k, "after-short"] > thr[k, "after-jobs"])
        bad(k ": threads after-short " thr[k, "after-short"] " > after-jobs " thr[k, "after-jobs"])
    }
    for (key in shm) {
      split(key, p, SUBSEP)
      if (shm[key] > shm[p[1], "idle"]) bad(p[1] ": /dev/shm " p[2] " " shm[key] " > idle")
    }
    exit failed
  }' "$dir/trace" "$dir/samples"; then
  failed=1
fi
# Which threads differ from idle after the jobs (names and counts).
for f in "$dir"/threads.*.after-short.*; do
  [[ -f "$f" ]] || continue
  idle="${f/after-short/idle}"
  if ! cmp -s "$idle" "$f"; then
    echo "threads of ${f##*/threads.} by name, idle -> after-short:"
    { diff "$idle" "$f" || true; } | sed -n 's/^</  idle:  /p; s/^>/  after: /p'
  fi
done
if [[ $failed -ne 0 ]]; then
  echo "soak: FAILED"
  exit 1
fi
echo "soak: PASS"
