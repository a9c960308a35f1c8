// SessionResults: the ResultAllocator over the requests' sessions: a new
// tensor goes into its request's session's result area (an arena the client
// maps; it frees the tensor when it is done with it).
//
// Thread-safety: thread-safe (sessions serialise their result areas).
#pragma once

#include "daemon/backend/backend.h"

namespace kolo::daemon {

class SessionResults final : public ResultAllocator {
 public:
  absl::StatusOr<uint8_t*> Allocate(FusedMember& m, uint64_t bytes, int64_t value) override;
};

}  // namespace kolo::daemon
