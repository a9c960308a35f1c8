#!/bin/bash
# End-to-end checks of the kolorun binary: flags, usage errors, exit codes,
# output prefixes and the private daemon (a fake kolod).
set -u

root="${TEST_SRCDIR}/${TEST_WORKSPACE}/client/kolorun"
kolorun="${root}/kolorun"
fake="${root}/testdata/fake_kolod.py"
fake_ssh="${root}/testdata/fake_ssh.sh"
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
    kill_grace_s daemon_start_timeout_s H hosts peer_port coordinator ssh \
    ssh_arg min_np max_np host_discovery_script discovery_interval_s \
    max_failures_per_host elastic_timeout_s output_filename; do
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

expect_grep "a remote rank is not signalled" "${tmp}/help" "--help"
expect_grep "KOLO_ELASTIC_JOINER=1" "${tmp}/help" "--help"
expect_grep "no bound with" "${tmp}/help" "--help"

# Elastic flag errors, in either spelling.
"${kolorun}" -np 2 --min-np 3 -- true 2>"${tmp}/err"
expect_rc 2 $? "--min-np above -np"
expect_grep "kolorun: --min-np 3 is more than -np 2" "${tmp}/err" "--min-np above -np"
"${kolorun}" -np 2 --max_np=1 -- true 2>"${tmp}/err"
expect_rc 2 $? "--max_np below -np"
expect_grep "--max-np 1 is less than -np 2" "${tmp}/err" "--max_np below -np"
"${kolorun}" -np 2 --min-np 0 -- true 2>"${tmp}/err"
expect_rc 2 $? "--min-np 0"
expect_grep "--min-np must be at least 1, got 0" "${tmp}/err" "--min-np 0"
"${kolorun}" -np 2 --max-np 0 -- true 2>"${tmp}/err"
expect_rc 2 $? "--max-np 0"
"${kolorun}" -np 1 --min-np 1 --discovery-interval-s=0 -- true 2>"${tmp}/err"
expect_rc 2 $? "--discovery-interval-s 0"
expect_grep "--discovery-interval-s must be a positive number" "${tmp}/err" \
    "--discovery-interval-s 0"

# An elastic job: a rank that fails once is restarted as a joiner; the job
# succeeds. The discovery script names this machine with 2 slots.
cat >"${tmp}/discover.sh" <<'SCRIPT'
#!/bin/sh
echo "# this machine"
echo localhost:2
SCRIPT
chmod +x "${tmp}/discover.sh"
mkdir "${tmp}/el"
"${kolorun}" -np 2 --min-np 1 --host-discovery-script "${tmp}/discover.sh" \
    --discovery-interval-s 0.05 --max-failures-per-host 2 --grace_s 5 \
    --private_daemon --kolod "${fake}" -- /bin/sh -c '
      d='"${tmp}"'/el
      echo "$KOLO_ELASTIC $KOLO_ELASTIC_MIN_SIZE $KOLO_ELASTIC_MAX_SIZE ${KOLO_ELASTIC_JOINER:-0}"
      if [ -z "$KOLO_ELASTIC_JOINER" ] && [ "$KOLO_RANK" = 1 ]; then exit 3; fi
      if [ -n "$KOLO_ELASTIC_JOINER" ]; then touch "$d/joined"; fi
      while [ ! -e "$d/joined" ]; do sleep 0.01; done' \
    >"${tmp}/out" 2>"${tmp}/err"
expect_rc 0 $? "elastic job"
expect_grep "[0] 1 1 0 0" "${tmp}/out" "elastic job"
expect_grep "[1] 1 1 0 0" "${tmp}/out" "elastic job"
expect_grep "[2] 1 1 0 1" "${tmp}/out" "elastic job"
expect_grep "kolorun: process [1] on localhost exited with status 3" "${tmp}/err" \
    "elastic job"
expect_grep "restarting it on host localhost as a joiner in 1s" "${tmp}/err" "elastic job"

# A rank that keeps failing: the host is blocklisted and the job ends below
# --min-np with a failure.
"${kolorun}" -np 2 --min_np 2 --max-failures-per-host 1 --grace_s 0.1 \
    --private_daemon --kolod "${fake}" -- /bin/sh -c \
    '[ "$KOLO_RANK" = 1 ] && exit 6; exec sleep 1000' >"${tmp}/out" 2>"${tmp}/err"
expect_rc 6 $? "elastic job below --min-np"
expect_grep "blocklisting it: no more ranks start there" "${tmp}/err" \
    "elastic job below --min-np"
expect_grep "1 rank(s) remain, fewer than --min-np 2; ending the job" "${tmp}/err" \
    "elastic job below --min-np"

# Host list errors.
"${kolorun}" -np 4 -H a:2,b:1 -- true 2>"${tmp}/err"
expect_rc 2 $? "too many ranks"
expect_grep "-np 4 is more than the 3 slots" "${tmp}/err" "too many ranks"
"${kolorun}" -np 1 --hosts a:x -- true 2>"${tmp}/err"
expect_rc 2 $? "bad slots"
expect_grep "slots \"x\"" "${tmp}/err" "bad slots"
"${kolorun}" -np 1 -H a -hosts b -- true 2>"${tmp}/err"
expect_rc 2 $? "-H and --hosts"

# A job spanning this machine and a (fake) remote host, which needs a kolod
# here: a listening socket stands in for it.
python3 -c 'import socket,sys,time
s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(64)
open(sys.argv[1] + ".ready", "w").close(); time.sleep(600)' "${tmp}/kolod.sock" &
listener=$!
trap 'kill "${listener}" 2>/dev/null; rm -rf "${tmp}"' EXIT
for _ in $(seq 500); do [[ -e "${tmp}/kolod.sock.ready" ]] && break; sleep 0.01; done
mkdir "${tmp}/ssh_log"
FAKE_SSH_LOG_DIR="${tmp}/ssh_log" "${kolorun}" -np 3 -H localhost:1,fakehost:2 \
    --socket "${tmp}/kolod.sock" --ssh "${fake_ssh}" --ssh_arg=-p \
    --ssh_arg 2222 --peer_port 7400 -- \
    /bin/sh -c 'echo "r=$KOLO_RANK l=$KOLO_LOCAL_RANK/$KOLO_LOCAL_SIZE c=$KOLO_COORDINATOR"; [ $KOLO_RANK = 1 ] && exit 3; exit 0' \
    >"${tmp}/out" 2>"${tmp}/err"
expect_rc 3 $? "multi-host job"
host="$(hostname)"
expect_grep "[0] r=0 l=0/1 c=${host}:7400" "${tmp}/out" "multi-host job"
expect_grep "[1] r=1 l=0/2 c=${host}:7400" "${tmp}/out" "multi-host job"
expect_grep "[2] r=2 l=1/2 c=${host}:7400" "${tmp}/out" "multi-host job"
expect_grep "kolorun: rank 1 on fakehost exited with status 3" "${tmp}/err" \
    "multi-host job"
cat "${tmp}"/ssh_log/* | tr '\0' '\n' >"${tmp}/ssh_argv"
expect_grep "2222" "${tmp}/ssh_argv" "--ssh_arg"
expect_grep "KOLO_SOCKET=${tmp}/kolod.sock" "${tmp}/ssh_argv" "remote socket"

# Without a kolod here, a job spanning hosts does not start.
"${kolorun}" -np 2 -H localhost,fakehost --socket "${tmp}/absent.sock" \
    --ssh "${fake_ssh}" -- true 2>"${tmp}/err"
expect_rc 1 $? "no kolod for a multi-host job"
expect_grep "needs the system kolod running on every host" "${tmp}/err" \
    "no kolod for a multi-host job"

# horovodrun's flags: the command starts without --, a kolod setting reaches
# the private kolod, the timeline path and the job's settings the ranks, and a
# flag without an equivalent says so.
"${kolorun}" -np 2 --private_daemon --kolod "${fake}" \
    --kolod_arg="--record=${tmp}/record" --fusion-threshold-mb 16 --cache-capacity 4096 \
    --timeline-filename "${tmp}/tl.json" --cycle-time-ms 5 --autotune --verbose \
    /bin/sh -c 'echo timeline $KOLO_TIMELINE fusion $KOLO_FUSION_THRESHOLD tune $KOLO_AUTOTUNE' \
    --fusion-threshold-mb 1 >"${tmp}/out" 2>"${tmp}/err"
expect_rc 0 $? "horovodrun flags"
expect_grep "[0] timeline ${tmp}/tl.json fusion 16777216 tune 1" "${tmp}/out" \
    "--timeline-filename, --fusion-threshold-mb, --autotune"
expect_grep "--response_cache=4096" "${tmp}/record" "--cache-capacity"
expect_grep "--cycle-time-ms 5: changes nothing here" "${tmp}/err" "--cycle-time-ms"
expect_grep "kolorun: running as: KOLO_FUSION_THRESHOLD=16777216 KOLO_CACHE_CAPACITY=4096 KOLO_TIMELINE=${tmp}/tl.json KOLO_AUTOTUNE=1 " \
    "${tmp}/err" "--verbose"
"${kolorun}" -np 2 --private_daemon --kolod "${fake}" --output-filename "${tmp}/o/p" \
    /bin/sh -c 'echo out $KOLO_RANK; echo err $KOLO_RANK >&2' >"${tmp}/out" 2>"${tmp}/err"
expect_rc 0 $? "--output-filename"
expect_grep "[1] out 1" "${tmp}/out" "--output-filename keeps the console"
expect_grep "out 1" "${tmp}/o/p/rank.1/stdout" "--output-filename stdout"
expect_grep "err 0" "${tmp}/o/p/rank.0/stderr" "--output-filename stderr"
"${kolorun}" --check-build >"${tmp}/out" 2>&1
expect_rc 0 $? "--check-build"
expect_grep "[X] kolod" "${tmp}/out" "--check-build"

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
