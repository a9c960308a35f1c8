#!/bin/bash
# The koloctl binary's exit codes and messages where no kolod is needed:
# usage errors (64), --help (0), no daemon (2, promptly), no admin token (1).
set -u
KOLOCTL="$TEST_SRCDIR/$TEST_WORKSPACE/koloctl/koloctl"
DIR=$(mktemp -d /tmp/koloctl-XXXXXX)
trap 'rm -rf "$DIR"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

out=$("$KOLOCTL" --help 2>&1); rc=$?
[ $rc -eq 0 ] || fail "--help exit $rc"
grep -q "timeline stop" <<<"$out" || fail "--help lacks commands: $out"

out=$("$KOLOCTL" frobnicate 2>&1); rc=$?
[ $rc -eq 64 ] || fail "unknown command exit $rc"
grep -q 'unknown command "frobnicate"' <<<"$out" || fail "unknown command text: $out"
grep -q "^usage: koloctl" <<<"$out" || fail "usage text missing: $out"

start=$(date +%s)
out=$(KOLO_SOCKET="$DIR/kolod.sock" "$KOLOCTL" --timeout_s 20 status 2>&1); rc=$?
[ $rc -eq 2 ] || fail "no daemon exit $rc: $out"
grep -qF "koloctl: no kolod answering on unix:$DIR/kolod.sock (is it running? --socket/--address)" \
  <<<"$out" || fail "no daemon text: $out"
[ $(( $(date +%s) - start )) -lt 10 ] || fail "no daemon took too long"

out=$(env -u KOLO_ADMIN_TOKEN "$KOLOCTL" --socket "$DIR/kolod.sock" drain 2>&1); rc=$?
[ $rc -eq 1 ] || fail "no token exit $rc: $out"
grep -qF "$DIR/admin.token" <<<"$out" || fail "no token text: $out"
echo PASS
