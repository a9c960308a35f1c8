#include "common/sd_notify.h"

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/errno_status.h"
#include "common/unique_fd.h"

namespace kolo {

absl::Status NotifyServiceManager(absl::string_view state) {
  const char* env = std::getenv("NOTIFY_SOCKET");
  if (env == nullptr) return absl::OkStatus();
  return NotifyServiceManagerAt(env, state);
}

absl::Status NotifyServiceManagerAt(absl::string_view notify_socket, absl::string_view state) {
  if (notify_socket.empty()) return absl::OkStatus();
  const bool abstract = notify_socket.front() == '@';
  if (!abstract && notify_socket.front() != '/') {
    return absl::InvalidArgumentError(absl::StrCat("NOTIFY_SOCKET \"", notify_socket,
                                                   "\": want an absolute path or @abstract name"));
  }

  sockaddr_un addr;
  std::memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  // A path needs room for its terminating NUL; an abstract name is exactly
  // the bytes given, the '@' becoming the leading NUL, and is not terminated.
  const size_t limit = abstract ? sizeof(addr.sun_path) : sizeof(addr.sun_path) - 1;
  if (notify_socket.size() > limit || (abstract && notify_socket.size() < 2)) {
    return absl::InvalidArgumentError(absl::StrCat("NOTIFY_SOCKET \"", notify_socket,
                                                   "\": ", notify_socket.size(),
                                                   " bytes, want 1 to ", limit));
  }
  std::memcpy(addr.sun_path, notify_socket.data(), notify_socket.size());
  if (abstract) addr.sun_path[0] = '\0';
  const socklen_t addr_len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) +
                                                    notify_socket.size() + (abstract ? 0 : 1));

  UniqueFd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) {
    return ErrnoToStatus(errno, "socket(AF_UNIX, SOCK_DGRAM) for NOTIFY_SOCKET");
  }
  ssize_t sent;
  do {
    sent = ::sendto(fd.get(), state.data(), state.size(), MSG_NOSIGNAL,
                    reinterpret_cast<const sockaddr*>(&addr), addr_len);
  } while (sent < 0 && errno == EINTR);
  if (sent < 0) {
    return ErrnoToStatus(errno, absl::StrCat("sendto NOTIFY_SOCKET ", notify_socket));
  }
  if (static_cast<size_t>(sent) != state.size()) {
    // A datagram is sent whole or not at all; a short count cannot happen.
    return absl::InternalError(absl::StrCat("sendto NOTIFY_SOCKET ", notify_socket, ": sent ", sent,
                                            " of ", state.size(), " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace kolo
