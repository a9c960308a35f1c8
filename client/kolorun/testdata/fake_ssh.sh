#!/bin/sh
# A stand-in for ssh in kolorun's tests. It records its arguments
# (NUL-terminated, in order) in $FAKE_SSH_LOG_DIR/ssh.<pid> when that variable
# is set, skips ssh's options and the host, and runs the remaining words the
# way sshd does: joined with spaces, through `sh -c`, here in a nearly empty
# environment (only PATH), as a fresh login on another host would be.
#
# FAKE_SSH_FAIL_HOST=HOST makes it fail like an unreachable host (status 255).
if [ -n "${FAKE_SSH_LOG_DIR:-}" ]; then
  printf '%s\0' "$@" >"${FAKE_SSH_LOG_DIR}/ssh.$$"
fi
while [ $# -gt 0 ]; do
  case "$1" in
    -[bcDEeFIiJLlmOopQRSWw]) shift 2 ;;  # Options that take a value.
    -*) shift ;;
    *) break ;;
  esac
done
if [ $# -lt 2 ]; then
  echo "fake ssh: no host or no command" >&2
  exit 255
fi
host="$1"
shift
if [ "${host}" = "${FAKE_SSH_FAIL_HOST:-}" ]; then
  echo "ssh: connect to host ${host} port 22: Connection refused" >&2
  exit 255
fi
exec env -i PATH="${PATH}" /bin/sh -c "$*"
