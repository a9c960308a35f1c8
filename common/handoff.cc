#include "common/handoff.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/errno_status.h"
#include "common/fd_passing.h"
#include "common/unique_fd.h"

namespace kolo {

std::string HandoffSocketPath(absl::string_view socket_path) {
  return absl::StrCat(socket_path, ".handoff");
}

std::string HandoffOkReply(absl::string_view ticket) { return absl::StrCat("OK ", ticket); }

std::string HandoffErrorReply(const absl::Status& status) {
  std::string reply = absl::StrCat("ERR ", static_cast<int>(status.code()), " ", status.message());
  if (reply.size() > kMaxHandoffMessageBytes) reply.resize(kMaxHandoffMessageBytes);
  return reply;
}

absl::StatusOr<std::string> ParseHandoffReply(absl::string_view reply) {
  if (absl::ConsumePrefix(&reply, "OK ")) {
    if (reply.size() != kHandoffTicketChars) {
      return absl::InternalError("kolod sent a malformed handoff ticket");
    }
    return std::string(reply);
  }
  if (absl::ConsumePrefix(&reply, "ERR ")) {
    size_t space = reply.find(' ');
    int code = 0;
    if (space != absl::string_view::npos && absl::SimpleAtoi(reply.substr(0, space), &code) &&
        code > 0 && code <= static_cast<int>(absl::StatusCode::kUnauthenticated)) {
      return absl::Status(static_cast<absl::StatusCode>(code), reply.substr(space + 1));
    }
  }
  return absl::InternalError("kolod sent a malformed handoff reply");
}

namespace {

// The outcome of one connection to the handoff socket.
struct Attempt {
  absl::StatusOr<std::string> ticket;
  // kolod refused for load, closed without an answer, or its backlog was
  // full: another try may well succeed.
  bool transient = false;
};

Attempt Transient(absl::Status status) { return Attempt{std::move(status), true}; }

// Sets SO_SNDTIMEO, which bounds a blocking connect to a full backlog and
// the send, to what is left before `deadline` (at least a millisecond).
absl::Status BoundSends(int sock, absl::Time deadline) {
  const absl::Duration left = std::max(absl::Milliseconds(1), deadline - absl::Now());
  timeval tv = absl::ToTimeval(left);
  if (setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0) {
    return ErrnoToStatus(errno, "setsockopt SO_SNDTIMEO");
  }
  return absl::OkStatus();
}

// kolod's reply on `sock`, or an empty message when it closed without one.
// When kolod refuses a connection and closes it with the request unread, the
// kernel reports the reset (an empty message here) before the refusal that
// kolod sent ahead of it; the refusal is then the next message.
absl::StatusOr<ReceivedMessage> ReceiveReply(int sock) {
  auto reply = ReceiveWithFd(sock, kMaxHandoffMessageBytes);
  if (!reply.ok() || !reply->bytes.empty()) return reply;
  auto after_reset = ReceiveWithFd(sock, kMaxHandoffMessageBytes);
  if (after_reset.ok() && !after_reset->bytes.empty()) return after_reset;
  return reply;
}

Attempt HandOffOnce(const std::string& handoff_path, int fd, absl::Time deadline) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, handoff_path.data(), handoff_path.size());
  UniqueFd sock(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!sock.valid()) return {ErrnoToStatus(errno, "socket")};
  if (absl::Status s = BoundSends(sock.get(), deadline); !s.ok()) return {s};
  if (connect(sock.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    absl::Status s =
        ErrnoToStatus(err, absl::StrCat("connect to kolod's handoff socket ", handoff_path));
    // A full backlog (EAGAIN once SO_SNDTIMEO ran out) or a kolod between
    // its socket file and its listen.
    return err == EAGAIN || err == ECONNREFUSED || err == EINTR ? Transient(s) : Attempt{s};
  }
  if (absl::Status s = SendWithFd(sock.get(), kHandoffRequest, fd); !s.ok()) {
    if (!absl::IsUnavailable(s)) return {s};
    // kolod closed the connection before the request went: a refusal, whose
    // reason may wait to be read.
    auto refusal = ReceiveReply(sock.get());
    if (refusal.ok() && !refusal->bytes.empty()) {
      absl::StatusOr<std::string> reason = ParseHandoffReply(refusal->bytes);
      if (!reason.ok()) {
        const bool busy = absl::IsResourceExhausted(reason.status());
        return Attempt{reason.status(), busy};
      }
    }
    return Transient(
        absl::UnavailableError(absl::StrCat("kolod closed the handoff on ", handoff_path)));
  }
  for (;;) {
    pollfd p{sock.get(), POLLIN, 0};
    int ms = static_cast<int>(
        absl::ToInt64Milliseconds(std::max(absl::ZeroDuration(), deadline - absl::Now())));
    int ready = poll(&p, 1, ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return {ErrnoToStatus(errno, "poll handoff socket")};
    if (ready == 0) {
      return {absl::DeadlineExceededError(
          absl::StrCat("kolod did not answer the handoff on ", handoff_path))};
    }
    break;
  }
  auto reply = ReceiveReply(sock.get());
  if (!reply.ok()) return {reply.status()};
  if (reply->bytes.empty()) {
    return Transient(
        absl::UnavailableError(absl::StrCat("kolod closed the handoff on ", handoff_path)));
  }
  absl::StatusOr<std::string> ticket = ParseHandoffReply(reply->bytes);
  const bool busy = absl::IsResourceExhausted(ticket.status());
  return Attempt{std::move(ticket), busy};
}

}  // namespace

absl::StatusOr<std::string> HandOff(const std::string& handoff_path, int fd,
                                    absl::Duration timeout) {
  if (handoff_path.empty() || handoff_path.size() >= sizeof(sockaddr_un::sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("handoff socket path too long: ", handoff_path));
  }
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + timeout;
  const absl::Time retry_until = start + std::min(timeout, kHandoffRetryFor);
  absl::Duration backoff = absl::Milliseconds(10);
  for (int tries = 1;; ++tries) {
    Attempt attempt = HandOffOnce(handoff_path, fd, deadline);
    if (attempt.ticket.ok() || !attempt.transient) return std::move(attempt.ticket);
    const absl::Time now = absl::Now();
    if (now + backoff >= retry_until) {
      const absl::Status& last = attempt.ticket.status();
      return absl::Status(last.code(),
                          absl::StrCat("kolod's handoff socket ", handoff_path, " refused ", tries,
                                       " handoff(s) over ", absl::FormatDuration(now - start), ": ",
                                       last.message()));
    }
    absl::SleepFor(backoff);
    backoff = std::min(2 * backoff, kHandoffMaxBackoff);
  }
}

}  // namespace kolo
