#!/usr/bin/env bash
# `kolod --help` prints the usage line and every flag of kolod, one entry
# each (Abseil lists only flags of files it recognizes as the program's).
set -uo pipefail
out=$(daemon/kolod --help 2>&1)
fail=0
for want in "kolod --socket PATH" "--socket" "--peer_address" "--stall_timeout_s" \
    "--transfer_timeout_s" "--metrics_address" "--max_sessions" \
    "--anonymous_call_deadline_s" "--max_anonymous_calls" "--max_status_calls_per_address"; do
  if ! grep -q -- "$want" <<<"$out"; then
    echo "kolod --help lacks \"$want\"" >&2
    fail=1
  fi
done
if grep -q "No flags matched" <<<"$out"; then
  echo "kolod --help matched no flags" >&2
  fail=1
fi
exit "$fail"
