// MemberSink: where the coordinator's messages to one member go (a gRPC
// stream for a remote daemon, a direct call for the local one).
//
// Thread-safety: implementations are thread-safe.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "proto/kolo/v1/peer.pb.h"

namespace kolo::daemon {

class MemberSink {
 public:
  virtual ~MemberSink() = default;
  // Must not block for long and must not call back into the coordinator.
  // Every member gets the same plan object: a sink keeps the pointer, never
  // a copy of its own.
  virtual void Send(std::shared_ptr<const kolo::v1::CoordinatorMessage> message) = 0;
};

// Messages to send once the coordinator's state lock is released, in the
// order the state changed.
using MemberOutbox = std::vector<
    std::pair<std::shared_ptr<MemberSink>, std::shared_ptr<const kolo::v1::CoordinatorMessage>>>;

}  // namespace kolo::daemon
