// NotifyServiceManager: tells the service manager (systemd and anything that
// speaks its notify protocol) about the daemon's state, without libsystemd.
//
// Protocol: the manager puts a socket path in $NOTIFY_SOCKET; the service
// sends newline-separated "KEY=VALUE" assignments to it as one AF_UNIX
// datagram: "READY=1" once it serves, "STOPPING=1" when it begins shutting
// down, "STATUS=..." for a one-line human-readable state shown by
// `systemctl status`. A path beginning with '@' names a socket in the abstract
// namespace (the '@' stands for the leading NUL byte).
//
// Thread-safety: safe from any thread, provided nobody calls setenv/unsetenv
// concurrently (it reads the environment).
#pragma once

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kolo {

// Sends `state` (e.g. "READY=1" or "STATUS=serving 3 jobs") to the socket
// named by $NOTIFY_SOCKET. Returns OK and does nothing when NOTIFY_SOCKET is
// unset or empty (not started by a service manager, or Type= is not notify).
// Errors name the socket: INVALID_ARGUMENT for an address this function cannot
// use (relative, too long, an unsupported family such as "vsock:"), otherwise
// the errno of socket/sendto converted by ErrnoToStatus.
absl::Status NotifyServiceManager(absl::string_view state);

// As above, to the socket `notify_socket` given explicitly (same syntax as
// $NOTIFY_SOCKET); an empty `notify_socket` is a no-op returning OK.
absl::Status NotifyServiceManagerAt(absl::string_view notify_socket, absl::string_view state);

}  // namespace kolo
