// Peer-protocol messages built from a fuzz input for the negotiation fuzz
// targets: mostly plausible (few names, small shapes, the job's ranks), with
// bits of the input choosing raw values for any field, so both the deep
// paths and the hostile edges are reached.
//
// Thread-safety: free functions.
#pragma once

#include "proto/kolo/v1/peer.pb.h"
#include "tools/fuzz/fuzz_input.h"

namespace kolo::daemon {

// A TensorMeta as a node of a job of `job_size` ranks might report it.
kolo::v1::TensorMeta TensorMetaFrom(fuzz::FuzzInput& in, int job_size);

}  // namespace kolo::daemon
