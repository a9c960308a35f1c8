// How the end of a job travels between the daemons of a job: its status
// code, its reason and whether responses already planned may still finish
// (ranks that left cleanly), to and from the Peer protocol's PeerAbort.
//
// Thread-safety: free functions.
#pragma once

#include "absl/status/status.h"
#include "proto/kolo/v1/peer.pb.h"

namespace kolo::daemon {

// `why` marked as the end of a job whose ranks finished and left: what is
// already planned may run to completion on every node.
absl::Status PlannedMayFinish(absl::Status why);
bool IsPlannedMayFinish(const absl::Status& why);

void ToPeerAbort(const absl::Status& why, kolo::v1::PeerAbort* out);
// From another daemon, so untrusted: an OK or unknown code reads as ABORTED.
absl::Status FromPeerAbort(const kolo::v1::PeerAbort& abort);

}  // namespace kolo::daemon
