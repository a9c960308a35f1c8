#!/bin/bash
# End-to-end checks of the kolorun binary: flags, usage errors, exit codes,
# output prefixes and the private daemon (a fake kolod).
set -u

root="${TEST_SRCDIR}/${TEST_WORKSPACE}/client/kolorun"
kolorun="${root}/kolorun"
fake="${root}/testdata/fake_kolod.py"
tmp="$(mktemp -d /tmp/kolorun_cli.XXXXXX)"
trap 'rm -rf "${tmp}"' EXIT
failures=0

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
expect_rc() {  # expect_rc WANT GOT WHAT
  [[ "$2" == "$1" ]] || fail "$3: exit status $2, want $1"
}
expect_grep() {  # expect_grep PATTERN FILE WHAT
  grep -qF -- "$1" "$2" || { fail "$3: no '$1' in:"; cat "$2"; }
}

# --help lists every flag.
"${kolorun}" --help >"${tmp}/help" 2>&1
for flag in np job_id socket private_daemon kolod kolod_arg grace_s \
    kill_grace_s daemon_start_timeout_s; do
  expect_grep "--${flag} " "${tmp}/help" "--help"
done

# Usage errors.
"${kolorun}" -np 0 -- true 2>"${tmp}/err"
expect_rc 2 $? "-np 0"
expect_grep "-np must be at least 1" "${tmp}/err" "-np 0"
"${kolorun}" -np 2 2>"${tmp}/err"
expect_rc 2 $? "missing command"
expect_grep "no command to run" "${tmp}/err" "missing command"
"${kolorun}" -np 2 -- 2>"${tmp}/err"
expect_rc 2 $? "empty command after --"

# A two-rank job on a private (fake) daemon, with repeated --kolod_arg.
"${kolorun}" -np 2 --private_daemon --kolod "${fake}" \
    --kolod_arg="--record=${tmp}/record" --kolod_arg --second \
    -- /bin/sh -c 'echo rank $KOLO_RANK of $KOLO_SIZE; echo oops >&2' \
    >"${tmp}/out" 2>"${tmp}/err"
expect_rc 0 $? "private daemon job"
expect_grep "[0] rank 0 of 2" "${tmp}/out" "private daemon job"
expect_grep "[1] rank 1 of 2" "${tmp}/out" "private daemon job"
expect_grep "[1] oops" "${tmp}/err" "private daemon job"
expect_grep "[kolod] fake kolod listening on" "${tmp}/err" "private daemon job"
expect_grep "--record=${tmp}/record --second" "${tmp}/record" "--kolod_arg"
expect_grep "SIGTERM" "${tmp}/record" "daemon stopped"

# KOLO_KOLOD and KOLO_SOCKET come from the environment; the exit status is
# the failing rank's.
KOLO_KOLOD="${fake}" KOLO_SOCKET="${tmp}/absent.sock" "${kolorun}" -np 2 \
    --grace_s=0.1 -- /bin/sh -c '[ $KOLO_RANK = 1 ] && exit 4; exec sleep 1000' \
    >"${tmp}/out" 2>"${tmp}/err"
expect_rc 4 $? "failing rank"
expect_grep "kolorun: no kolod accepts connections on ${tmp}/absent.sock" \
    "${tmp}/err" "env socket"
expect_grep "kolorun: rank 1 exited with status 4" "${tmp}/err" "failing rank"
expect_grep "kolorun: rank 0 killed by signal SIGTERM" "${tmp}/err" "failing rank"

# A command that does not exist.
"${kolorun}" -np 1 --private_daemon --kolod "${fake}" -- /nonexistent/prog \
    2>"${tmp}/err"
expect_rc 1 $? "missing program"
expect_grep "starting rank 0" "${tmp}/err" "missing program"

if (( failures > 0 )); then
  echo "${failures} check(s) failed"
  exit 1
fi
echo "all kolorun CLI checks passed"
