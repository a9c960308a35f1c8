# daemons_lib.sh: sourced by the benchmarks that run Kolo across daemons on
# this machine (each daemon a "node" with its own socket and peer port).
# The caller sets: repo (the checkout), dir (a scratch folder), token (the
# job token), pids=() (the daemons started, for its cleanup), and may set
# kolod_extra (more kolod flags, split on spaces).
#   start_daemons COUNT            kolods n0..n(COUNT-1), mutual TLS between them
#   peer_of SOCKET                 that daemon's peer address
#   run_ranks NODES JOB CMD...     one rank of CMD per daemon; prints rank 0's output
#   stop_daemons                   stops the daemons started, and waits for them
#   need_command CMD PACKAGE...    installs the Debian packages when CMD is missing;
#                                  false when it is still missing
#   need_openmpi                   builds $dir/mpi_allreduce_perf; false, with a note,
#                                  without OpenMPI
#   mpi_loopback NP ARGS...        mpi_allreduce_perf ARGS in NP processes over TCP on
#                                  loopback
# Variables set in the caller's environment reach every rank.

start_daemons() {  # count
  # The Peer plane runs mutual TLS, as on a cluster (a test CA, loopback names).
  tools/make_test_ca.sh "$dir/certs" $(seq -f 'node%g' 0 $(($1 - 1))) >&2
  for n in $(seq 0 $(($1 - 1))); do
    bazel-bin/daemon/kolod --socket "$dir/n$n.sock" --status_address= \
      --peer_address=127.0.0.1:0 --peer_tls_ca="$dir/certs/ca.pem" \
      --peer_tls_cert="$dir/certs/node$n.pem" --peer_tls_key="$dir/certs/node$n.key" \
      --node_name="node$n" --log_level=${kolod_log:-warn} ${kolod_extra:-} >"$dir/n$n.log" 2>&1 &
    pids+=($!)
  done
  for n in $(seq 0 $(($1 - 1))); do
    for _ in $(seq 1 200); do [[ -S "$dir/n$n.sock" ]] && break; sleep 0.05; done
  done
}
peer_of() {  # socket -> peer address of that daemon (it may still be starting)
  local out
  for _ in $(seq 1 50); do
    out=$("$repo/bazel-bin/koloctl/koloctl" --socket "$1" --json status 2>/dev/null) && break
    sleep 0.1
  done
  python3 -c 'import json,sys; print(json.load(sys.stdin)["node"]["config"]["peer_address"])' \
    <<<"$out"
}
run_ranks() {  # nodes job binary args...
  local nodes=$1 job=$2; shift 2
  local coordinator; coordinator=$(peer_of "$dir/n0.sock")
  local rp=()
  for n in $(seq 0 $((nodes - 1))); do
    KOLO_SOCKET="$dir/n$n.sock" KOLO_JOB_ID="$job" KOLO_JOB_TOKEN=$token KOLO_RANK=$n \
      KOLO_SIZE=$nodes KOLO_LOCAL_RANK=0 KOLO_LOCAL_SIZE=1 KOLO_COORDINATOR="$coordinator" \
      "$@" >"$dir/$job.$n.out" 2>&1 &
    rp+=($!)
  done
  for p in "${rp[@]}"; do wait "$p"; done
  cat "$dir/$job.0.out"
}

stop_daemons() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
need_command() {  # command package...
  command -v "$1" >/dev/null && return 0
  local cmd=$1; shift
  local sudo_cmd=(); [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -q "$@" >&2 || true
  command -v "$cmd" >/dev/null
}
need_openmpi() {
  if need_command mpicc openmpi-bin libopenmpi-dev && command -v mpirun >/dev/null; then
    mpicc -O2 -o "$dir/mpi_allreduce_perf" "$repo/examples/bench/mpi_allreduce_perf.c" -lm
    return 0
  fi
  echo "NOTE: OpenMPI could not be installed; no MPI column" >&2
  return 1
}
mpi_loopback() {  # processes args...
  local np=$1; shift
  mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl tcp,self \
    --mca btl_tcp_if_include lo -np "$np" "$dir/mpi_allreduce_perf" "$@"
}
