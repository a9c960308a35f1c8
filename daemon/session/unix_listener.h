// UnixListener: accepts on kolod's gRPC Unix socket itself, so that each
// connection's uid is known from the kernel (SO_PEERCRED) before gRPC reads
// a byte, and counts the connections each uid holds against a share and a
// total. A connection within both is handed to the gRPC server (which then
// reports its peer as "fd:N", see CallGate); one over either is closed at
// once, and the uid's other connections and every other uid are untouched.
//
// gRPC owns and closes a connection once it is handed over and says nothing
// when it does; the listener notices by the descriptor: it remembers each
// one's socket inode and, every second and before it refuses anyone, gives
// back the share of each descriptor that is closed or now names another
// file.
//
// Thread-safety: Start and the destructor from one thread; one thread of its
// own accepts; the counts may be read from any thread.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/unique_fd.h"
#include "daemon/session/shares.h"

namespace kolo::daemon {

struct UnixListenerOptions {
  std::string path;  // the socket file; must not exist (the caller claims it)
  ShareLimits connections;
  std::string knob;  // what sets the share, for errors
};

class UnixListener {
 public:
  // Takes each connection it admits (non-blocking, close-on-exec); called on
  // the listener's thread.
  using Serve = std::function<void(UniqueFd connection)>;

  // Binds and listens on `options.path` and starts accepting.
  static absl::StatusOr<std::unique_ptr<UnixListener>> Start(UnixListenerOptions options,
                                                             Serve serve);
  // Stops accepting and closes the listening socket (the connections
  // already served stay with their server); the socket file stays.
  ~UnixListener();
  UnixListener(const UnixListener&) = delete;
  UnixListener& operator=(const UnixListener&) = delete;

  // Connections of `uid` (or of all) that are counted now.
  int connections_of(uid_t uid) const;
  int connections() const;

 private:
  struct Served {
    ino_t ino = 0;
    dev_t dev = 0;
    Shares::Lease lease;
  };
  UnixListener(UnixListenerOptions options, Serve serve, UniqueFd listener, UniqueFd wake);
  void Loop();
  void AcceptReady();
  // Gives back the shares of connections whose descriptors are gone.
  void Sweep();

  const UnixListenerOptions options_;
  const Serve serve_;
  Shares shares_;
  UniqueFd listener_;
  UniqueFd wake_;  // an eventfd the destructor writes
  // Owned by the thread: served connections by descriptor number.
  absl::flat_hash_map<int, Served> served_;
  std::thread thread_;
};

// The identity of a uid in Shares and CallGate: "uid 1000".
std::string UidIdentity(uid_t uid);

}  // namespace kolo::daemon
