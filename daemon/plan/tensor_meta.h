// MetaOf: what a node reports to the coordinator about one locally ready
// name (see the protocol in proto/kolo/v1/peer.proto).
//
// Thread-safety: a pure function; safe from any thread.
#pragma once

#include <vector>

#include "daemon/core/request.h"
#include "proto/kolo/v1/peer.pb.h"

namespace kolo::daemon::plan {

// The metadata of `set` (its requests in ascending rank order, all of this
// node's ranks of the set) as this node reports it: the first rank's view,
// plus every rank's rows (allgather) or splits (alltoall; an even split
// among the set's `set_size` ranks, or `job_size` when unset, where a rank
// sent none), and the local disagreement if its ranks disagreed.
kolo::v1::TensorMeta MetaOf(const ReadySet& set, int job_size);

// `set`'s requests by ascending rank (the order MetaOf reports them in).
std::vector<const Request*> ByRank(const ReadySet& set);

}  // namespace kolo::daemon::plan
