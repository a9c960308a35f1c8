#include "daemon/session/handoff_server.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>
#include <list>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/errno_status.h"
#include "common/handoff.h"
#include "common/shared_segment.h"
#include "common/start_thread.h"
#include "daemon/session/shares.h"
#include "spdlog/spdlog.h"

namespace kolo::daemon {

std::string AnswerHandoff(const ProcessCredentials& caller, const std::string& request,
                          UniqueFd segment, HandoffTable* table, absl::Time now,
                          std::shared_ptr<const CallerMemory> memory) {
  if (request != kHandoffRequest) {
    return HandoffErrorReply(
        absl::InvalidArgumentError("not a Kolo handoff request (client and kolod differ?)"));
  }
  Handoff handoff;
  handoff.caller = caller;
  if (memory != nullptr && memory->pid() == caller.pid) handoff.memory = std::move(memory);
  if (segment.valid()) {
    auto facts = SharedSegment::Inspect(segment.get());
    if (!facts.ok()) return HandoffErrorReply(facts.status());
    if (facts->owner != caller.uid) {
      return HandoffErrorReply(
          absl::PermissionDeniedError("the session segment must be created by the attaching user"));
    }
    handoff.segment = std::move(segment);
    handoff.segment_bytes = facts->bytes;
  }
  auto ticket = table->Deposit(std::move(handoff), now);
  if (!ticket.ok()) return HandoffErrorReply(ticket.status());
  return HandoffOkReply(*ticket);
}

absl::StatusOr<std::unique_ptr<HandoffServer>> HandoffServer::Start(HandoffServerOptions options,
                                                                    HandoffTable* table) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (options.path.empty() || options.path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "handoff socket path must be 1 to ", sizeof(addr.sun_path) - 1, " bytes: ", options.path));
  }
  std::memcpy(addr.sun_path, options.path.data(), options.path.size());
  UniqueFd listener(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!listener.valid()) return ErrnoToStatus(errno, "socket");
  if (bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("bind ", options.path));
  }
  if (listen(listener.get(), 128) != 0) return ErrnoToStatus(errno, "listen");
  UniqueFd wake(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) return ErrnoToStatus(errno, "eventfd");
  std::unique_ptr<HandoffServer> server(
      new HandoffServer(std::move(options), table, std::move(listener), std::move(wake)));
  absl::StatusOr<std::thread> thread =
      StartThread("the fd handoff server", "kolo-handoff", [s = server.get()] { s->Loop(); });
  if (!thread.ok()) return thread.status();
  server->thread_ = std::move(*thread);
  return server;
}

HandoffServer::~HandoffServer() {
  uint64_t one = 1;
  (void)!write(wake_.get(), &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  unlink(options_.path.c_str());
}

namespace {

// A connection in progress: accepted, not yet answered, and held in its
// uid's share until it goes.
struct Connection {
  UniqueFd fd;
  ProcessCredentials caller;
  std::shared_ptr<const CallerMemory> memory;
  absl::Time deadline;
  Shares::Lease share;
};

}  // namespace

void HandoffServer::Loop() {
  // Declared before the connections, whose leases it must outlive.
  Shares shares("handoffs in progress", "the handoff socket's share per uid",
                ShareLimits{options_.max_connections_per_uid, options_.max_connections});
  std::list<Connection> open;
  std::vector<pollfd> fds;
  for (;;) {
    const absl::Time now = absl::Now();
    // Connections past their deadline are dropped.
    for (auto it = open.begin(); it != open.end();) {
      it = it->deadline <= now ? open.erase(it) : std::next(it);
    }
    absl::Time next = now + absl::Seconds(1);
    fds.clear();
    fds.push_back({wake_.get(), POLLIN, 0});
    fds.push_back({listener_.get(), POLLIN, 0});
    for (const Connection& c : open) {
      fds.push_back({c.fd.get(), POLLIN, 0});
      next = std::min(next, c.deadline);
    }
    int ms = static_cast<int>(absl::ToInt64Milliseconds(next - now)) + 1;
    int ready = poll(fds.data(), fds.size(), ms);
    if (ready < 0 && errno != EINTR) {
      spdlog::error("handoff socket: poll: {}", std::strerror(errno));
      return;
    }
    if (ready <= 0) continue;
    if (fds[0].revents != 0) return;
    // Requests first, in the order polled (the list and fds share an order).
    size_t i = 2;
    for (auto it = open.begin(); it != open.end(); ++i) {
      if (fds[i].revents == 0) {
        ++it;
        continue;
      }
      auto message = ReceiveWithFd(it->fd.get(), kMaxHandoffMessageBytes);
      if (message.ok() && !message->bytes.empty()) {
        std::string reply = AnswerHandoff(it->caller, message->bytes, std::move(message->fd),
                                          table_, absl::Now(), it->memory);
        (void)SendWithFd(it->fd.get(), reply, -1);
      } else if (!message.ok() && absl::IsUnavailable(message.status())) {
        ++it;  // EAGAIN: a spurious wake-up
        continue;
      } else if (!message.ok()) {
        (void)SendWithFd(it->fd.get(), HandoffErrorReply(message.status()), -1);
      }
      it = open.erase(it);
    }
    if (fds[1].revents == 0) continue;
    // At most one cap's worth per wake-up: a client that reconnects as fast
    // as it is refused cannot keep this loop from the requests above.
    for (int accepted = 0; accepted < options_.max_connections; ++accepted) {
      UniqueFd conn(accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (!conn.valid()) break;
      // Who connected, from the kernel, before anything is read.
      auto caller = CredentialsOf(conn.get());
      if (!caller.ok()) {
        (void)SendWithFd(conn.get(), HandoffErrorReply(caller.status()), -1);
        continue;
      }
      absl::StatusOr<Shares::Lease> share = shares.Take(absl::StrCat("uid ", caller->uid));
      if (!share.ok()) {
        (void)SendWithFd(conn.get(), HandoffErrorReply(share.status()), -1);
        continue;
      }
      // Taken now, while the peer that connected is known to be alive.
      absl::StatusOr<std::shared_ptr<const CallerMemory>> memory =
          CallerMemory::OfSocketPeer(conn.get());
      open.push_back(Connection{std::move(conn), *caller,
                                memory.ok() ? *std::move(memory) : nullptr,
                                absl::Now() + options_.handshake_timeout, *std::move(share)});
    }
  }
}

}  // namespace kolo::daemon
