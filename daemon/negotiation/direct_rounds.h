// DirectRounds: one node's share of a job's direct rounds (the protocol is
// ready_rounds.h), wired to the job. It decides which names go in a round
// instead of to the coordinator, sends the round messages over the job's
// sealed lane, and turns what a round's close runs into planned entries:
// cache-id order, fused by plan/fusion's rule under the threshold every
// node got in the Welcome, so every node plans the same responses.
//
// The negotiator (peer_negotiator.h) owns it, feeds it the names ready here,
// the messages from the other nodes and the coordinator's plan count, and
// applies what Pump returns to its PlanOrder, in order.
//
// Thread-safety: thread-compatible; the negotiator's rounds lock guards it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "daemon/core/request.h"
#include "daemon/negotiation/plan_order.h"
#include "daemon/negotiation/ready_rounds.h"
#include "daemon/plan/tensor_desc.h"
#include "daemon/transport/transport.h"
#include "daemon/wire/member_link.h"
#include "proto/kolo/v1/peer.pb.h"

namespace kolo::daemon {

struct DirectRoundsOptions {
  std::string job_id;
  std::string node_name;
  // The job's sealed lane (the round messages go over it); outlives this.
  MessageLane* lane = nullptr;
  int self = -1;        // this node's index
  int plans_node = -1;  // the coordinator's node
  // Every node's ranks, by node index (so as many entries as nodes).
  std::vector<std::vector<int>> node_ranks;
  uint64_t fusion_threshold = 0;  // the job's, from the Welcome
};

class DirectRounds {
 public:
  // The first byte of a round's message over the lane. A serialized
  // MemberMessage or CoordinatorMessage never starts with it (no field has
  // number 0).
  static constexpr char kMark = '\0';
  static bool IsRoundMessage(absl::string_view message) {
    return !message.empty() && message.front() == kMark;
  }

  explicit DirectRounds(DirectRoundsOptions options);

  bool off() const { return rounds_.off(); }
  // Whether `set` (its agreed metadata `meta`) went into a round here. What
  // may is a property of the name and its metadata, the same on every node:
  // process set 0, host memory, no control step, not grouped (the
  // coordinator plans a group as one), and a name `link`'s cache holds. A
  // changed name spills (the coordinator rules on it from now on), and a
  // join (every rank here joined) takes this node out of the rounds.
  bool Take(const ReadySet& set, const kolo::v1::TensorMeta& meta, MemberLink& link);
  // Another node's message, after its marker byte; an error when it breaks
  // the rounds (the job ends).
  absl::Status Receive(int peer, absl::string_view message);
  // On the coordinator's node: how many plans it has received.
  void PlansSeen(uint64_t plans) { rounds_.PlansSeen(plans); }

  // What the rounds decided since the last Pump.
  struct Due {
    // For the PlanOrder, in this order.
    std::vector<RoundStep> steps;
    // Keys (PeerKey) of names ready here that go to the coordinator now.
    std::vector<std::string> spilled;
  };
  // Sends the messages due (to every other node) and returns the rest.
  Due Pump();

  // For stall reports: by key, the ranks of the nodes whose latest round
  // message lacked a name that is in this node's state.
  absl::flat_hash_map<std::string, std::vector<int>> MissingRanks() const;

 private:
  struct Name {
    std::string key;  // PeerKey of the name
    plan::TensorDesc desc;
  };

  // The planned entries of the names `ids` that ran in a round (ascending).
  std::vector<PlannedEntry> EntriesOf(const std::vector<uint32_t>& ids);

  const DirectRoundsOptions options_;
  const int nodes_;
  ReadyRounds rounds_;
  // The names in this node's round state, by cache id.
  absl::flat_hash_map<uint32_t, Name> names_;
};

}  // namespace kolo::daemon
