// HandoffServer: serves the handoff socket (see common/handoff.h). One thread
// polls the listening socket and every connection in progress; each
// connection has a deadline, and how many may be open is capped in total and
// per uid (the kernel's SO_PEERCRED, read at accept before any byte), so a
// client that connects and never writes costs one descriptor for a few
// seconds, and one user holding idle connections cannot keep another's
// handoff out.
//
// Thread-safety: Start/stop from one thread; the table is thread-safe.
#pragma once

#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/unique_fd.h"
#include "daemon/session/handoff_table.h"

namespace kolo::daemon {

struct HandoffServerOptions {
  std::string path;  // the socket file; must not exist (the caller claims it)
  absl::Duration handshake_timeout = absl::Seconds(5);
  // Connections in progress (accepted, not yet answered), per uid and in
  // total (see shares.h); one over either is answered RESOURCE_EXHAUSTED
  // and closed at once. The share is well below the total, so that
  // max_connections / max_connections_per_uid users are always served side
  // by side, however many connections each of them tries to hold.
  int max_connections = 256;
  int max_connections_per_uid = 16;
};

class HandoffServer {
 public:
  // Binds `options.path` and starts serving into `table` (which must outlive
  // the server).
  static absl::StatusOr<std::unique_ptr<HandoffServer>> Start(HandoffServerOptions options,
                                                              HandoffTable* table);
  ~HandoffServer();
  HandoffServer(const HandoffServer&) = delete;
  HandoffServer& operator=(const HandoffServer&) = delete;

  const std::string& path() const { return options_.path; }

 private:
  HandoffServer(HandoffServerOptions options, HandoffTable* table, UniqueFd listener, UniqueFd wake)
      : options_(std::move(options)),
        table_(table),
        listener_(std::move(listener)),
        wake_(std::move(wake)) {}
  void Loop();

  const HandoffServerOptions options_;
  HandoffTable* const table_;
  UniqueFd listener_;
  UniqueFd wake_;  // an eventfd; written to stop the loop
  std::thread thread_;
};

// Answers one handoff request from `caller` (already received; `memory`,
// when the kernel named its process, travels with the ticket): checks the
// message and the descriptor and deposits them. Returns the reply to send.
std::string AnswerHandoff(const ProcessCredentials& caller, const std::string& request,
                          UniqueFd segment, HandoffTable* table, absl::Time now,
                          std::shared_ptr<const CallerMemory> memory = nullptr);

}  // namespace kolo::daemon
