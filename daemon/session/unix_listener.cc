#include "daemon/session/unix_listener.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/errno_status.h"
#include "common/start_thread.h"
#include "spdlog/spdlog.h"

namespace kolo::daemon {
namespace {

// How often closed connections are looked for when nobody is refused.
constexpr int kSweepMs = 1000;
// Connections taken per wake-up, so a flood cannot keep the loop from
// sweeping or stopping.
constexpr int kAcceptBatch = 64;
// After the process runs out of descriptors, the pause before accepting
// again (a listener that stays readable would otherwise spin).
constexpr int kOutOfDescriptorsMs = 100;

}  // namespace

std::string UidIdentity(uid_t uid) { return absl::StrCat("uid ", uid); }

absl::StatusOr<std::unique_ptr<UnixListener>> UnixListener::Start(UnixListenerOptions options,
                                                                  Serve serve) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (options.path.empty() || options.path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "socket path must be 1 to ", sizeof(addr.sun_path) - 1, " bytes: ", options.path));
  }
  std::memcpy(addr.sun_path, options.path.data(), options.path.size());
  UniqueFd listener(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!listener.valid()) return ErrnoToStatus(errno, "socket");
  if (bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("bind ", options.path));
  }
  if (listen(listener.get(), SOMAXCONN) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("listen ", options.path));
  }
  UniqueFd wake(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) return ErrnoToStatus(errno, "eventfd");
  std::unique_ptr<UnixListener> l(
      new UnixListener(std::move(options), std::move(serve), std::move(listener), std::move(wake)));
  absl::StatusOr<std::thread> thread =
      StartThread("the gRPC socket's listener", "kolo-listen", [p = l.get()] { p->Loop(); });
  if (!thread.ok()) return thread.status();
  l->thread_ = std::move(*thread);
  return l;
}

UnixListener::UnixListener(UnixListenerOptions options, Serve serve, UniqueFd listener,
                           UniqueFd wake)
    : options_(std::move(options)),
      serve_(std::move(serve)),
      shares_(absl::StrCat("connections to ", options_.path), options_.knob, options_.connections),
      listener_(std::move(listener)),
      wake_(std::move(wake)) {}

UnixListener::~UnixListener() {
  uint64_t one = 1;
  (void)!write(wake_.get(), &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
}

int UnixListener::connections_of(uid_t uid) const { return shares_.held(UidIdentity(uid)); }

int UnixListener::connections() const { return shares_.total_held(); }

void UnixListener::Loop() {
  absl::Time next_sweep = absl::Now() + absl::Milliseconds(kSweepMs);
  absl::Time resume_accept = absl::InfinitePast();
  for (;;) {
    const absl::Time now = absl::Now();
    const bool accepting = now >= resume_accept;
    pollfd fds[2] = {{wake_.get(), POLLIN, 0}, {listener_.get(), POLLIN, 0}};
    const absl::Time until = accepting ? next_sweep : std::min(next_sweep, resume_accept);
    const int ms =
        static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(until - now) + 1));
    const int ready = poll(fds, accepting ? 2 : 1, ms);
    if (ready < 0 && errno != EINTR) {
      spdlog::error("{}: poll: {}", options_.path, std::strerror(errno));
      return;
    }
    if (fds[0].revents != 0) return;
    if (absl::Now() >= next_sweep) {
      Sweep();
      next_sweep = absl::Now() + absl::Milliseconds(kSweepMs);
    }
    if (!accepting || (fds[1].revents & POLLIN) == 0) continue;
    for (int i = 0; i < kAcceptBatch; ++i) {
      UniqueFd conn(accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (!conn.valid()) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          spdlog::warn("{}: cannot accept a connection: {}", options_.path, std::strerror(errno));
          resume_accept = absl::Now() + absl::Milliseconds(kOutOfDescriptorsMs);
        }
        break;
      }
      ucred cred{};
      socklen_t len = sizeof(cred);
      struct stat st {};
      if (getsockopt(conn.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
          len != sizeof(cred) || fstat(conn.get(), &st) != 0) {
        continue;  // the peer is gone already
      }
      const std::string who = UidIdentity(cred.uid);
      absl::StatusOr<Shares::Lease> lease = shares_.Take(who);
      if (!lease.ok()) {
        // Closed connections may still be counted: look, then ask again.
        Sweep();
        lease = shares_.Take(who);
      }
      if (!lease.ok()) {
        spdlog::debug("{}: {}", options_.path, std::string(lease.status().message()));
        continue;  // closed: the client sees the connection end
      }
      // A descriptor number seen before was closed by gRPC since: this
      // replaces (and gives back) its old connection's share.
      served_[conn.get()] = Served{st.st_ino, st.st_dev, *std::move(lease)};
      serve_(std::move(conn));
    }
  }
}

void UnixListener::Sweep() {
  for (auto it = served_.begin(); it != served_.end();) {
    struct stat st {};
    const bool same =
        fstat(it->first, &st) == 0 && st.st_ino == it->second.ino && st.st_dev == it->second.dev;
    if (same) {
      ++it;
    } else {
      served_.erase(it++);
    }
  }
}

}  // namespace kolo::daemon
