// The koloctl commands: each makes one call to a kolod's kolo.v1.Status or
// kolo.v1.Admin service and prints the answer to `out`, as text for people
// or, with `json`, as the response message in JSON for scripts.
//
// Errors: a call the daemon fails returns its gRPC code with a message that
// names the call (e.g. `AbortJob: job "x" not found`); local failures
// (writing the timeline file) return their own codes. Nothing is printed on
// error.
//
// Thread-safety: the functions are thread-safe if the stubs are; they keep
// no state.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/kolo/v1/status.grpc.pb.h"

namespace kolo::koloctl {

// The services of one kolod. Both stubs must outlive every command run with
// them; `admin` may be null for the read-only commands.
struct Stubs {
  kolo::v1::Status::StubInterface* status = nullptr;
  kolo::v1::Admin::StubInterface* admin = nullptr;
};

struct CommandOptions {
  bool json = false;
  // The deadline of each call.
  absl::Duration timeout = absl::Seconds(10);
  // Sent as "authorization: Bearer <admin_token>" on Admin calls; when it
  // is empty no authorization is sent (and kolod refuses the call).
  std::string admin_token;
  // Where the token came from ("--admin_token", "/run/kolo/admin.token"),
  // named in the error when the daemon refuses it.
  std::string admin_token_source;
  // Over the Unix socket: an identity ticket from kolod's handoff socket,
  // sent as "kolo-handoff" metadata on every call, so kolod shows this user
  // their own jobs (root sees all). Empty: node facts only, unless the admin
  // token is sent.
  std::string identity_ticket;
};

// Node facts and one line per job.
absl::Status RunStatus(const Stubs& stubs, const CommandOptions& options, std::ostream& out);
// A table of jobs.
absl::Status RunJobs(const Stubs& stubs, const CommandOptions& options, std::ostream& out);
// One job in detail.
absl::Status RunJob(const Stubs& stubs, const CommandOptions& options, const std::string& job_id,
                    std::ostream& out);
// Every stalled tensor.
absl::Status RunStalls(const Stubs& stubs, const CommandOptions& options, std::ostream& out);
// The Prometheus text exposition, unchanged.
absl::Status RunMetrics(const Stubs& stubs, const CommandOptions& options, std::ostream& out);
// Starts the timeline; `max_events` 0 leaves the daemon's default.
absl::Status RunTimelineStart(const Stubs& stubs, const CommandOptions& options,
                              uint64_t max_events, std::ostream& out);
// Stops the timeline and writes its trace JSON to `out_path`. The file is
// opened before the call, so that a path that cannot be written fails
// without stopping (and losing) the recording. With `json`, prints the
// response without its trace_json (which is in the file).
absl::Status RunTimelineStop(const Stubs& stubs, const CommandOptions& options,
                             const std::string& out_path, std::ostream& out);
// Admin: aborts a job.
absl::Status RunAbort(const Stubs& stubs, const CommandOptions& options, const std::string& job_id,
                      const std::string& reason, std::ostream& out);
// Admin: refuses new jobs.
absl::Status RunDrain(const Stubs& stubs, const CommandOptions& options, std::ostream& out);
// Admin: sets the daemon's log level.
absl::Status RunLogLevel(const Stubs& stubs, const CommandOptions& options,
                         const std::string& level, std::ostream& out);

}  // namespace kolo::koloctl
