#!/usr/bin/python3
"""A stand-in for kolod in kolorun's tests: listens on --socket PATH.

Extra arguments:
  --record=FILE    write argv to FILE at start and "SIGTERM" when stopped
  --exit_now=CODE  exit with CODE at once, without listening
  --never_listen   never create the socket (tests the start timeout)
  --ignore_term    ignore SIGTERM (tests the SIGKILL fallback)
"""
import signal
import socket
import sys
import time

args = sys.argv[1:]
sock_path = args[args.index("--socket") + 1]
options = dict(a[2:].split("=", 1) for a in args if a.startswith("--") and "=" in a)
record = options.get("record")
if record:
    with open(record, "w") as f:
        f.write(" ".join(args) + "\n")

if "exit_now" in options:
    print("fake kolod: exiting as asked", file=sys.stderr, flush=True)
    sys.exit(int(options["exit_now"]))


def on_term(signo, frame):
    if record:
        with open(record, "a") as f:
            f.write("SIGTERM\n")
    sys.exit(0)


signal.signal(signal.SIGTERM, signal.SIG_IGN if "--ignore_term" in args else on_term)

if "--never_listen" in args:
    while True:
        time.sleep(3600)

server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(sock_path)
# Both lines are written before the socket accepts: once it does, kolorun
# may run the job and stop this daemon before a later print ran.
print("fake kolod listening on " + sock_path, flush=True)
print("fake kolod no newline at exit", end="", flush=True)
server.listen(64)
while True:
    conn, _ = server.accept()
    conn.close()
