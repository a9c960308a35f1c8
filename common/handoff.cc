#include "common/handoff.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
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

absl::StatusOr<std::string> HandOff(const std::string& handoff_path, int fd,
                                    absl::Duration timeout) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (handoff_path.empty() || handoff_path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("handoff socket path too long: ", handoff_path));
  }
  std::memcpy(addr.sun_path, handoff_path.data(), handoff_path.size());
  UniqueFd sock(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!sock.valid()) return ErrnoToStatus(errno, "socket");
  if (connect(sock.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("connect to kolod's handoff socket ", handoff_path));
  }
  if (absl::Status s = SendWithFd(sock.get(), kHandoffRequest, fd); !s.ok()) return s;
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    pollfd p{sock.get(), POLLIN, 0};
    int ms = static_cast<int>(
        absl::ToInt64Milliseconds(std::max(absl::ZeroDuration(), deadline - absl::Now())));
    int ready = poll(&p, 1, ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return ErrnoToStatus(errno, "poll handoff socket");
    if (ready == 0) {
      return absl::DeadlineExceededError(
          absl::StrCat("kolod did not answer the handoff on ", handoff_path));
    }
    break;
  }
  auto reply = ReceiveWithFd(sock.get(), kMaxHandoffMessageBytes);
  if (!reply.ok()) return reply.status();
  if (reply->bytes.empty()) {
    return absl::UnavailableError(absl::StrCat("kolod closed the handoff on ", handoff_path));
  }
  return ParseHandoffReply(reply->bytes);
}

}  // namespace kolo
