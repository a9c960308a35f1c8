// The coordinator's readiness tally: which nodes reported each name, whether
// their reports agree, and when a name is globally ready (every node of its
// set that has not fully joined reported it). Names reported by cache bit
// are counted in the response cache; a join, or a full report of a cached
// name, moves their rounds here first. Globally ready names wait, in the
// order they became ready, for the planner.
//
// Thread-safety: not thread-safe; the coordinator's lock guards it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "daemon/coordinator/membership.h"
#include "daemon/coordinator/response_cache.h"
#include "daemon/plan/join_tracker.h"
#include "daemon/plan/process_set_registry.h"
#include "daemon/plan/tensor_desc.h"
#include "proto/kolo/v1/peer.pb.h"

namespace kolo::daemon {

// A globally ready name.
struct ReadyName {
  kolo::v1::TensorMeta meta;
  absl::Status error;             // fails the name on every node
  std::vector<int> joined_nodes;  // fully joined nodes of its set, then
};

class Readiness {
 public:
  // `members`, `sets` and `cache` are the coordinator's and outlive this.
  Readiness(int size, const Membership& members, const plan::ProcessSetRegistry& sets,
            ResponseCache& cache)
      : size_(size), members_(members), sets_(sets), cache_(cache) {}

  // Node `node`'s Ready report: its full reports, then its cache bits, then
  // its join (which comes after every name it reported before it).
  void AddReport(int node, const kolo::v1::Ready& ready);
  // One name node `node` reported in full (a join too).
  void Add(int node, const kolo::v1::TensorMeta& meta);
  bool anyone_joined() const { return joins_.any(); }

  bool has_ready() const { return !ready_.empty(); }
  // The globally ready names, in the order they became ready.
  std::vector<ReadyName> TakeReady();
  // Process set `id` was removed: takes its names still waiting (they
  // fail on every node that has them).
  std::vector<kolo::v1::TensorMeta> TakeWaitingOfSet(int id);

 private:
  struct Pending {
    kolo::v1::TensorMeta meta;  // from the first node that reported
    int first_node = -1;
    std::vector<bool> reported;  // by node index
    int count = 0;
    plan::TensorDesc desc;  // of `meta`, what every other node must agree with
    absl::Status error;
    std::vector<std::vector<int64_t>> rows;    // allgather: by node index
    std::vector<std::vector<int64_t>> splits;  // alltoall: by node index
    int joined = 0;                            // ranks that had joined on the nodes that reported
  };

  // Every rank of `node` has joined: the others stop waiting for it.
  void AddJoin(int node, const kolo::v1::TensorMeta& meta);
  // Folds node `node`'s report of `meta` into `p`.
  void Tally(int node, const kolo::v1::TensorMeta& meta, Pending& p) const;
  // Node `node` reported cached name `id` by its bit: while nobody joined
  // and the name has no round in pending_, the cache counts it; otherwise
  // it takes the general path.
  void AddCached(int node, uint32_t id, bool anyone_joined);
  // Moves counted rounds of cached names into pending_.
  void SpillRound(uint32_t id);
  void SpillRounds();
  // Moves pending `key` to ready_ once every node of its set that has not
  // fully joined reported it.
  void MaybeComplete(const std::string& key);
  // An allgather's rows and an alltoall's split matrix, by rank of its set,
  // from the nodes' reports.
  void LayOutRows(Pending& p) const;
  // Nodes of `process_set` all of whose ranks have joined.
  std::vector<int> JoinedNodesOfSet(int process_set) const;
  // OK if `p` can run with joined ranks, else why not.
  absl::Status JoinedError(const Pending& p, const std::vector<int>& joined_nodes) const;

  const int size_;
  const Membership& members_;
  const plan::ProcessSetRegistry& sets_;
  ResponseCache& cache_;
  absl::flat_hash_map<std::string, Pending> pending_;
  std::vector<ReadyName> ready_;
  // Nodes all of whose ranks have joined, and the last rank to join.
  plan::JoinTracker joins_;
};

}  // namespace kolo::daemon
