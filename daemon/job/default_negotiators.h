// The negotiators kolod runs: a job whose ranks all attach to this daemon
// negotiates alone (LocalNegotiator, over the daemon's host backend); a job
// that spans nodes negotiates with its coordinator over the Peer plane
// (PeerNegotiator) and moves host tensors with the transport backend.
//
// Thread-safety: the factory returned is stateless and thread-safe.
#pragma once

#include "daemon/job/negotiator_factory.h"

namespace kolo::daemon {

NegotiatorFactory DefaultNegotiators();

}  // namespace kolo::daemon
