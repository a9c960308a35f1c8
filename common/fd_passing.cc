#include "common/fd_passing.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/errno_status.h"

namespace kolo {

absl::StatusOr<ProcessCredentials> CredentialsOf(int socket_fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(socket_fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return ErrnoToStatus(errno, "SO_PEERCRED");
  }
  if (len != sizeof(cred) || cred.pid <= 0) {
    return absl::PermissionDeniedError("the kernel names no process for this connection");
  }
  return ProcessCredentials{cred.pid, cred.uid, cred.gid};
}

absl::Status SendWithFd(int socket_fd, absl::string_view bytes, int fd) {
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  ssize_t n;
  do {
    n = sendmsg(socket_fd, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return ErrnoToStatus(errno, "sendmsg");
  if (static_cast<size_t>(n) != bytes.size()) {
    return absl::UnavailableError(absl::StrCat("sent ", n, " of ", bytes.size(), " bytes"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ReceivedMessage> ReceiveWithFd(int socket_fd, size_t max_bytes) {
  ReceivedMessage out;
  out.bytes.resize(max_bytes + 1);
  iovec iov{out.bytes.data(), out.bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  // Room for a few descriptors, so that extra ones are received (and closed)
  // rather than silently dropped with MSG_CTRUNC.
  alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = recvmsg(socket_fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
    return absl::UnavailableError("recvmsg: no message is waiting");
  }
  if (n < 0 && errno == ECONNRESET) n = 0;  // the peer is gone: as at EOF
  if (n < 0) return ErrnoToStatus(errno, "recvmsg");
  int fds = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (fds++ == 0) {
        out.fd.Reset(fd);
      } else {
        ::close(fd);
      }
    }
  }
  if ((msg.msg_flags & MSG_CTRUNC) != 0 || fds > 1) {
    return absl::InvalidArgumentError("a message may carry at most one descriptor");
  }
  if (static_cast<size_t>(n) > max_bytes || (msg.msg_flags & MSG_TRUNC) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("message longer than ", max_bytes, " bytes"));
  }
  out.bytes.resize(static_cast<size_t>(n));
  return out;
}

}  // namespace kolo
