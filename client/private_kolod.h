// A private kolod for a job on one node whose ranks find no kolod on their
// socket (today: a torchrun job). Every local rank derives the same private
// socket from the job id, in a directory only the user can enter
// ($XDG_RUNTIME_DIR/kolo, else /tmp/kolo-<uid>, mode 0700, checked to be the
// user's own); local rank 0 starts kolod there (KolodLocator: KOLO_KOLOD,
// beside libkolo, PATH) with --exit_when_idle_s, so it exits a few seconds
// after the job's ranks are gone, and logs to <socket>.log; every local rank
// then waits for the socket to accept connections.
//
// Thread-safety: call before the process starts threads that fork (rank 0
// forks; only async-signal-safe calls run between fork and exec).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kolo {

struct PrivateKolodRequest {
  std::string job_id;
  int local_rank = 0;
  absl::Duration start_timeout = absl::Seconds(30);
  int exit_when_idle_s = 10;
};

// The socket of the job's private kolod, started by local rank 0 when none
// accepts there yet, once it accepts connections.
absl::StatusOr<std::string> UsePrivateKolod(const PrivateKolodRequest& request);

// The private socket's path for `job_id` under `dir` (a pure function, for
// tests): <dir>/<16 hex digits of the job id's hash>.sock.
std::string PrivateKolodSocket(const std::string& dir, const std::string& job_id);

}  // namespace kolo
