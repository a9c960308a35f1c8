// Test harness for tests that span processes: a real kolod on a private
// socket and rank processes with the KOLO_* environment.
//
// Thread-safety: not thread-safe; one test thread drives it.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kolo::testing {

// Paths of the binaries, relative to the test's runfiles directory.
inline constexpr char kKolodPath[] = "daemon/kolod";
inline constexpr char kTestRankPath[] = "tests/integration/test_rank";
// A job token of 128 bits, as kolod wants by default.
inline constexpr char kTestJobToken[] = "0123456789abcdef0123456789abcdef";

// A fresh directory under /tmp (socket paths must stay under 108 bytes),
// removed with what it holds when the test program exits.
std::string MakeTempDir();

// The other local user of the tests that play one ("nobody").
inline constexpr uid_t kOtherUser = 65534;
// Whether this process may become kOtherUser (root outside a user namespace
// that maps only itself); tests that need it skip otherwise.
bool CanBecomeAnotherUser();

class DaemonProcess {
 public:
  // Starts kolod on `socket_path` and waits until it accepts connections.
  // Its Peer plane is off unless `extra_args` give --peer_address with TLS
  // files or --peer_plaintext (see PeerFlags).
  static absl::StatusOr<DaemonProcess> Start(const std::string& socket_path,
                                             std::vector<std::string> extra_args = {});
  DaemonProcess(DaemonProcess&& o) noexcept;
  DaemonProcess& operator=(DaemonProcess&&) = delete;
  ~DaemonProcess();

  const std::string& socket_path() const { return socket_; }
  pid_t pid() const { return pid_; }
  bool Alive() const;
  // What kolod wrote to stdout and stderr (a sanitizer's report included),
  // for a failure message: the log goes with the test's temporary folder.
  std::string Log() const;
  // Sends `sig` and reaps the process; its exit status (128 + a signal's
  // number for one that killed it; -1 when it cannot be known).
  int Kill(int sig);

 private:
  DaemonProcess(pid_t pid, std::string socket) : pid_(pid), socket_(std::move(socket)) {}
  pid_t pid_ = -1;
  std::string socket_;
  // Once reaped, by Alive or Kill.
  mutable std::optional<int> exit_code_;
};

struct RankResult {
  int exit_code = -1;  // or 128 + signal
  std::string output;  // stdout and stderr
};

// A set of rank processes of one job.
class Ranks {
 public:
  // Starts `n` ranks of `argv` in job `job_id` against `socket_path`.
  static absl::StatusOr<Ranks> Start(const std::string& socket_path, const std::string& job_id,
                                     int n, const std::vector<std::string>& argv,
                                     const std::string& token = kTestJobToken);
  // Starts the ranks [first_rank, first_rank + local_size) of a job of
  // `size` ranks spanning nodes, on the node whose daemon listens on
  // `socket_path`; `coordinator` is the peer address of rank 0's daemon.
  static absl::StatusOr<Ranks> StartOnNode(const std::string& socket_path,
                                           const std::string& job_id, int size, int first_rank,
                                           int local_size, const std::string& coordinator,
                                           const std::vector<std::string>& argv,
                                           const std::string& token = kTestJobToken);
  Ranks(Ranks&&) = default;
  ~Ranks();

  // Waits for every rank, killing those still running at `timeout`.
  std::vector<RankResult> Wait(absl::Duration timeout);
  // Waits until rank `rank`'s output contains `text`.
  bool WaitForOutput(int rank, const std::string& text, absl::Duration timeout);
  pid_t pid(int rank) const { return pids_[rank]; }

 private:
  Ranks() = default;
  std::vector<pid_t> pids_;
  std::vector<std::string> logs_;
  std::vector<int> codes_;
};

std::string ReadFile(const std::string& path);

// Flags that serve the Peer plane on a free loopback port with mutual TLS,
// as node `name` ("a", "b" or "c") of the test CA (//tools:test_peer_certs,
// a data dependency of the test); `ca` and `cert_dir` pick another CA or
// another CA's certificates.
inline constexpr char kTestCertDir[] = "tools/test_peer_certs";
inline constexpr char kOtherCertDir[] = "tools/test_peer_certs_other";
std::vector<std::string> PeerTlsFlags(const std::string& name,
                                      const std::string& cert_dir = kTestCertDir,
                                      const std::string& ca_dir = kTestCertDir);

}  // namespace kolo::testing
