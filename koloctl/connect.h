// Opening the gRPC channel to a kolod, and telling "no kolod answering"
// apart from errors the daemon returns.
//
// Thread-safety: thread-safe (no state).
#pragma once

#include <grpcpp/channel.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kolo::koloctl {

// Connects to `target` ("unix:PATH" or "HOST:PORT") and waits until the
// channel is ready. Fails with UNAVAILABLE, and the message
// `no kolod answering on <target> (is it running? --socket/--address)`
// followed by the cause, when the socket file is missing (at once), the
// connection is refused (at the first failed attempt, not after retries),
// or nothing answers within `timeout`. The channel accepts responses of any
// size (timeline traces are large).
absl::StatusOr<std::shared_ptr<grpc::Channel>> Connect(const std::string& target,
                                                       absl::Duration timeout);

}  // namespace kolo::koloctl
