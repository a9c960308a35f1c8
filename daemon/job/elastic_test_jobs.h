// For the ElasticGroup tests: each epoch's Job over `backend`, on this node
// alone (no Peer plane; the tests look at how ranks are seated).
#pragma once

#include <memory>
#include <utility>

#include "daemon/backend/backend.h"
#include "daemon/job/elastic_group.h"
#include "daemon/job/default_negotiators.h"
#include "daemon/job/job.h"

namespace kolo::daemon {

inline ElasticGroup::MakeJob TestEpochJobs(Backend* backend) {
  return [backend](const EpochLayout& epoch) {
    JobLayout layout;
    layout.local_size = epoch.local_size;
    layout.elastic_epoch = epoch.epoch;
    return std::make_shared<Job>("elastic", "token", epoch.size, backend, uint64_t{64} << 20,
                                 DefaultNegotiators(), JobObservers{}, std::move(layout));
  };
}

}  // namespace kolo::daemon
