// How a job is laid out across nodes, what it needs from its daemon when it
// spans them, and what its ranks may hold: the description a job is made
// from, read by the job, its registry and the factory of its negotiator.
//
// Thread-safety: plain values; copies are independent.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/time/time.h"
#include "daemon/plan/job_settings.h"
#include "daemon/transport/transport.h"

namespace kolo::daemon {

class CoordinatorRegistry;
class ElasticLeaders;
class PeerCredentials;
class RendezvousCaller;

// What a job that spans nodes needs from its daemon.
struct MultiNodeEnv {
  std::string node_name;
  CoordinatorRegistry* coordinators = nullptr;
  absl::Duration peer_timeout = absl::Seconds(10);
  // Makes each multi-node job's transport (UCX in kolod).
  TransportFactory* transports = nullptr;
  // How the Peer plane is secured; null when it is off.
  std::shared_ptr<const PeerCredentials> peer_credentials;
  // Elastic jobs across nodes: this daemon's Peer address, how it calls
  // another daemon's Peer.Rendezvous, and the membership leaders it runs.
  std::string peer_address;
  RendezvousCaller* rendezvous = nullptr;
  ElasticLeaders* elastic_leaders = nullptr;
};

// What one job's ranks may hold in kolod.
struct JobLimits {
  // Names a rank submitted that wait for other ranks (RESOURCE_EXHAUSTED
  // beyond this).
  int max_pending_per_rank = 4096;
  // The most names a job's coordinator may cache (kolod's
  // --response_cache; a job may ask for fewer).
  uint32_t max_cache_capacity = 1024;
};

// How the job is laid out: `local_size` of its ranks attach here (0: every
// rank); with fewer local ranks than ranks, or a coordinator address, the
// job spans nodes.
struct JobLayout {
  int local_size = 0;
  std::string coordinator;  // the peer address of the daemon hosting rank 0
  MultiNodeEnv env;
  JobLimits limits;
  // An elastic job's membership epoch (1 for the first; 0: not elastic). A
  // rank that leaves an elastic epoch fails the others' collectives with
  // MEMBERSHIP_CHANGED (common/membership.h) instead of ABORTED: they reset
  // into the next epoch.
  uint64_t elastic_epoch = 0;
  // The id the job's daemons negotiate under (empty: the job id). An elastic
  // epoch across nodes negotiates as "<job id>:e<epoch>", so that each epoch
  // has a coordinator of its own.
  std::string negotiation_id;
  // The job's settings as its first rank asked for them (every other rank,
  // and every node, must ask for the same), and as they are in force here
  // (daemon/plan/job_settings.h); `fusion_threshold_cap` is this kolod's
  // bound on the fusion threshold.
  kolo::v1::JobSettings asked_settings;
  plan::JobSettings settings;
  uint64_t fusion_threshold_cap = uint64_t{64} << 20;
};

// Whether a job of `size` ranks laid out as `layout` spans nodes (then its
// negotiator talks to a coordinator).
bool SpansNodes(int size, const JobLayout& layout);

}  // namespace kolo::daemon
