#!/usr/bin/env bash
# Starts kolod exactly as deploy/systemd/kolod.service does (its ExecStart=
# line, with the example flagfile deploy/kolod.flags), moved into a temporary
# directory, and checks what the unit relies on:
#   1. every flag of the example flagfile is accepted;
#   2. kolod sends READY=1 to $NOTIFY_SOCKET (the unit is Type=notify);
#   3. the socket appears with the flagfile's mode and group, the admin token
#      is written with mode 0600, and koloctl status works over the socket and
#      over the TCP status address;
#   4. SIGTERM makes kolod exit 0 and remove its socket;
#   5. `systemd-analyze verify` accepts the unit (when systemd-analyze exists).
#
# Usage: unit_exec_test.sh KOLOD KOLOCTL UNIT_FILE FLAGFILE
# (Bazel passes them; by hand, from the repository root:
#   deploy/test/unit_exec_test.sh bazel-bin/daemon/kolod \
#     bazel-bin/koloctl/koloctl deploy/systemd/kolod.service deploy/kolod.flags)
set -euo pipefail

fail() { echo "FAIL: $*" >&2; exit 1; }
abspath() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }

[[ $# -eq 4 ]] || fail "usage: $0 KOLOD KOLOCTL UNIT_FILE FLAGFILE"
kolod="$(abspath "$1")"
koloctl="$(abspath "$2")"
unit="$(abspath "$3")"
flagfile="$(abspath "$4")"
for f in "$kolod" "$koloctl"; do [[ -x "$f" ]] || fail "$f is not an executable"; done
for f in "$unit" "$flagfile"; do [[ -r "$f" ]] || fail "$f is not readable"; done

# Bounded waits: poll a condition every 0.1 s until a deadline.
wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
  local deadline=$((SECONDS + $1)) what="$2"
  shift 2
  until "$@"; do
    ((SECONDS < deadline)) || { echo "timed out after waiting for $what" >&2; return 1; }
    sleep 0.1
  done
}

# sockaddr_un allows 107 bytes, more than Bazel's TEST_TMPDIR may leave.
tmp="$(mktemp -d /tmp/kolo-unit.XXXXXX)"
kolod_pid=""
notify_pid=""
cleanup() {
  if [[ -n "$kolod_pid" ]] && kill -0 "$kolod_pid" 2>/dev/null; then
    kill -KILL "$kolod_pid" 2>/dev/null || true
  fi
  if [[ -n "$notify_pid" ]] && kill -0 "$notify_pid" 2>/dev/null; then
    kill "$notify_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
show_log() { echo "----- kolod log -----" >&2; cat "$tmp/kolod.log" >&2 || true; echo "---------------------" >&2; }

# --- The unit's command line ------------------------------------------------
exec_lines="$(grep -c '^ExecStart=' "$unit" || true)"
[[ "$exec_lines" == 1 ]] || fail "want exactly one ExecStart= line in $unit, found $exec_lines"
exec_line="$(grep '^ExecStart=' "$unit")"
read -r -a argv <<<"${exec_line#ExecStart=}"
[[ "${argv[0]}" == /* ]] || fail "ExecStart= must start with an absolute path, got '${argv[0]}'"
echo "unit runs: ${argv[*]}"

# --- The flagfile, moved into $tmp -------------------------------------------
# The socket group: "kolo" as in the example where that group exists here,
# otherwise our own group, so --socket_group is exercised either way.
if getent group kolo >/dev/null 2>&1; then group=kolo; else group="$(id -gn)"; fi
sock="$tmp/kolod.sock"
token="$tmp/admin.token"
grep -Ev '^[[:space:]]*#?[[:space:]]*--(socket|socket_group|admin_token_file|status_address|metrics_address|peer_address)=' \
  "$flagfile" >"$tmp/kolod.flags"
cat >>"$tmp/kolod.flags" <<FLAGS
# Rewritten by unit_exec_test.sh:
--socket=$sock
--socket_group=$group
--admin_token_file=$token
--status_address=127.0.0.1:0
--peer_address=
--metrics_address=
FLAGS
socket_mode="$(sed -n 's/^--socket_mode=0*\([0-7]*\)$/\1/p' "$flagfile" | tail -1)"
[[ -n "$socket_mode" ]] || fail "$flagfile sets no --socket_mode"

cmd=("$kolod")
flagfiles=0
for arg in "${argv[@]:1}"; do
  case "$arg" in
    --flagfile=*) cmd+=("--flagfile=$tmp/kolod.flags"); flagfiles=$((flagfiles + 1)) ;;
    *) cmd+=("$arg") ;;
  esac
done
[[ "$flagfiles" == 1 ]] || fail "ExecStart= should pass exactly one --flagfile=, found $flagfiles"

# --- The service manager's notify socket --------------------------------------
notify_log="$tmp/notify.log"
have_notify=0
if command -v python3 >/dev/null 2>&1; then
  notify_sock="$tmp/notify.sock"
  python3 - "$notify_sock" "$notify_log" <<'PY' &
import socket, sys
path, log = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(path)
s.settimeout(120)
with open(log, "a", buffering=1) as out:
    while True:
        try:
            data = s.recv(4096).decode("utf-8", "replace")
        except socket.timeout:
            break
        for line in data.split("\n"):
            out.write(line + "\n")
        if "STOPPING=1" in data.split("\n"):
            break
PY
  notify_pid=$!
  wait_for 10 "the notify receiver" test -S "$notify_sock" || fail "notify receiver did not start"
  have_notify=1
else
  echo "SKIP: READY=1 check (python3 not found to play the service manager)"
fi

# --- Start kolod as the unit would --------------------------------------------
echo "starting: ${cmd[*]}"
(
  # The unit sets no KOLO_* variables; do not let the caller's leak in.
  for v in $(env | sed -n 's/^\(KOLO_[A-Z0-9_]*\)=.*/\1/p'); do unset "$v"; done
  if ((have_notify)); then export NOTIFY_SOCKET="$notify_sock"; else unset NOTIFY_SOCKET; fi
  exec "${cmd[@]}"
) >"$tmp/kolod.log" 2>&1 &
kolod_pid=$!

socket_up() { [[ -S "$sock" ]] || ! kill -0 "$kolod_pid" 2>/dev/null; }
wait_for 30 "the socket $sock" socket_up || { show_log; fail "kolod did not create $sock within 30 s"; }
if ! kill -0 "$kolod_pid" 2>/dev/null; then
  rc=0; wait "$kolod_pid" || rc=$?
  kolod_pid=""
  show_log
  fail "kolod exited with status $rc before serving (flags of the example not accepted?)"
fi

if ((have_notify)); then
  ready() { grep -qx 'READY=1' "$notify_log" 2>/dev/null; }
  wait_for 30 "READY=1" ready || {
    show_log
    fail "kolod never sent READY=1 to NOTIFY_SOCKET; under Type=notify systemd would kill it after TimeoutStartSec"
  }
  echo "ok: kolod sent READY=1"
fi

# --- What the flagfile asked for ----------------------------------------------
read -r mode sgroup <<<"$(stat -c '%a %G' "$sock")"
[[ "$mode" == "$socket_mode" ]] || fail "socket mode is $mode, the flagfile says 0$socket_mode"
[[ "$sgroup" == "$group" ]] || fail "socket group is $sgroup, --socket_group=$group"
echo "ok: socket $sock mode 0$mode group $sgroup"
wait_for 10 "the admin token $token" test -s "$token" || { show_log; fail "kolod did not write $token"; }
token_mode="$(stat -c '%a' "$token")"
[[ "$token_mode" == 600 ]] || fail "admin token mode is 0$token_mode, want 0600"
echo "ok: admin token written, mode 0600"

# --- koloctl status -------------------------------------------------------------
status_out="$("$koloctl" --socket "$sock" status 2>&1)" || {
  echo "$status_out" >&2; show_log; fail "koloctl --socket $sock status failed"; }
echo "----- koloctl status -----"
echo "$status_out"
json_out="$("$koloctl" --socket "$sock" --json status 2>&1)" || {
  echo "$json_out" >&2; show_log; fail "koloctl --socket $sock --json status failed"; }
echo "----- koloctl --json status -----"
echo "$json_out"

json_string() {  # json_string KEY...: the first string value of any KEY
  local key
  for key in "$@"; do
    sed -n 's/.*"'"$key"'"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p' <<<"$json_out" | head -1
  done | head -1
}
version="$(json_string version)"
[[ -n "$version" ]] || fail "koloctl --json status has no node version"
grep -qF -- "$version" <<<"$status_out" || fail "koloctl status does not print the node version '$version'"
echo "ok: node version $version"

# The TCP status listener, on the port kolod picked for 127.0.0.1:0.
address="$(json_string status_address statusAddress)"
if [[ -z "$address" || "$address" == *:0 ]]; then
  fail "koloctl --json status reports no bound status_address (got '$address')"
fi
"$koloctl" --address "$address" status >/dev/null 2>&1 || fail "koloctl --address $address status failed"
echo "ok: status over TCP at $address"

# --- SIGTERM ------------------------------------------------------------------
kill -TERM "$kolod_pid"
exited() { ! kill -0 "$kolod_pid" 2>/dev/null; }
wait_for 30 "kolod to exit after SIGTERM" exited || { show_log; fail "kolod still running 30 s after SIGTERM"; }
rc=0; wait "$kolod_pid" || rc=$?
kolod_pid=""
[[ "$rc" == 0 ]] || { show_log; fail "kolod exited with status $rc after SIGTERM, want 0"; }
[[ ! -e "$sock" ]] || fail "kolod left its socket $sock behind"
echo "ok: SIGTERM -> exit 0, socket removed"
if ((have_notify)); then
  if grep -qx 'STOPPING=1' "$notify_log"; then
    echo "ok: kolod sent STOPPING=1"
  else
    echo "note: kolod did not send STOPPING=1 on SIGTERM (optional, shown by systemctl status)"
  fi
fi

# --- systemd-analyze verify -----------------------------------------------------
if command -v systemd-analyze >/dev/null 2>&1; then
  mkdir -p "$tmp/verify"
  # verify insists that ExecStart= names an existing executable.
  sed "s#^ExecStart=[^[:space:]]*#ExecStart=$kolod#" "$unit" >"$tmp/verify/kolod.service"
  verify_rc=0
  verify_out="$(systemd-analyze verify "$tmp/verify/kolod.service" 2>&1)" || verify_rc=$?
  [[ -z "$verify_out" ]] || echo "$verify_out"
  [[ "$verify_rc" == 0 ]] || fail "systemd-analyze verify exited $verify_rc"
  # Warnings about the unit itself (unknown keys, bad values) count as errors.
  if grep -q 'kolod\.service' <<<"$verify_out"; then
    fail "systemd-analyze verify reported problems in kolod.service"
  fi
  echo "ok: systemd-analyze verify"
else
  echo "SKIP: systemd-analyze verify (systemd-analyze not installed on this machine)"
fi

echo "PASS"
