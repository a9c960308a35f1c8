// Passing a file descriptor over a Unix stream socket (SCM_RIGHTS) and
// reading who is on the other end of one (SO_PEERCRED).
//
// Thread-safety: free functions; the caller owns the sockets.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/unique_fd.h"

namespace kolo {

// The process at the other end of a connected Unix socket, as the kernel
// recorded it when the connection was made.
struct ProcessCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

absl::StatusOr<ProcessCredentials> CredentialsOf(int socket_fd);

// Sends `bytes` in one message, with `fd` attached when it is >= 0.
absl::Status SendWithFd(int socket_fd, absl::string_view bytes, int fd);

// One message of at most `max_bytes`, and the one descriptor it carried (if
// any). Extra descriptors are closed and make the message an error, as does
// a truncated message or control block. Returns an empty message at EOF or
// when the peer reset the connection, and UNAVAILABLE (only) when no message
// is waiting on a non-blocking socket. Never blocks.
struct ReceivedMessage {
  std::string bytes;
  UniqueFd fd;
};
absl::StatusOr<ReceivedMessage> ReceiveWithFd(int socket_fd, size_t max_bytes);

}  // namespace kolo
