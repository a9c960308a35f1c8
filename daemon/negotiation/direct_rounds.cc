#include "daemon/negotiation/direct_rounds.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/coordinator/coordinator_options.h"
#include "daemon/plan/fusion.h"
#include "daemon/plan/tensor_meta.h"
#include "proto/kolo/abi/collective_traits.h"
#include "spdlog/spdlog.h"

namespace kolo::daemon {

DirectRounds::DirectRounds(DirectRoundsOptions options)
    : options_(std::move(options)),
      nodes_(static_cast<int>(options_.node_ranks.size())),
      rounds_(nodes_, options_.self, options_.plans_node) {}

bool DirectRounds::Take(const ReadySet& set, const kolo::v1::TensorMeta& meta, MemberLink& link) {
  if (rounds_.off()) return false;
  const Request& first = set.requests.front();
  if (first.kind == CollectiveKind::kJoin) {
    // The coordinator counts this node out: every node goes back to it at
    // the close of the next round.
    rounds_.Leave();
    return false;
  }
  if (set.process_set != 0 || meta.device() || IsControl(first.kind) || first.group_size > 1) {
    return false;
  }
  bool same = false;
  std::optional<uint32_t> id = link.CacheIdOf(meta, &same);
  if (!id.has_value() || !rounds_.Takes(*id)) return false;
  if (!same) {
    // It changed here: it goes to the coordinator in full, and the next
    // round takes it there on every node.
    rounds_.Spill(*id);
    spdlog::info(
        "job {}: \"{}\" changed on node {}: it negotiates with the coordinator from now on",
        options_.job_id, set.name, options_.node_name);
    return false;
  }
  rounds_.AddReady(*id);
  names_[*id] = Name{PeerKey(set.process_set, set.name), plan::DescOf(meta)};
  return true;
}

absl::Status DirectRounds::Receive(int peer, absl::string_view message) {
  kolo::v1::ReadyRound round;
  if (!round.ParseFromArray(message.data(), static_cast<int>(message.size()))) {
    return absl::InvalidArgumentError(
        absl::StrCat("an unreadable message of ", message.size(), " bytes"));
  }
  return rounds_.Receive(peer, round);
}

DirectRounds::Due DirectRounds::Pump() {
  ReadyRounds::Output out = rounds_.Pump();
  absl::Status failed;
  for (const kolo::v1::ReadyRound& m : out.messages) {
    auto bytes = std::make_shared<std::string>(1, kMark);
    m.AppendToString(bytes.get());
    for (int n = 0; n < nodes_; ++n) {
      if (n == options_.self) continue;
      if (absl::Status s = options_.lane->SendMessage(n, bytes); !s.ok() && failed.ok()) failed = s;
    }
  }
  if (!failed.ok()) {
    // Only an aborted transport refuses: the job is ending already.
    spdlog::warn("job {}: a direct round's message did not go out: {}", options_.job_id,
                 failed.ToString());
  }
  Due due;
  for (ReadyRounds::Event& e : out.events) {
    switch (e.kind) {
      case ReadyRounds::Event::Kind::kReleasePlans:
        due.steps.push_back(PlanRelease{e.plans});
        break;
      case ReadyRounds::Event::Kind::kRun:
        due.steps.push_back(EntriesOf(e.ids));
        break;
      case ReadyRounds::Event::Kind::kSpill:
        for (uint32_t id : e.ids) {
          auto it = names_.find(id);
          if (it == names_.end()) continue;
          due.spilled.push_back(std::move(it->second.key));
          names_.erase(it);
        }
        break;
      case ReadyRounds::Event::Kind::kOff:
        spdlog::info(
            "job {}: the direct rounds ended at round {} (a node's ranks all joined): "
            "the coordinator plans every name from here",
            options_.job_id, rounds_.round());
        break;
    }
  }
  return due;
}

std::vector<PlannedEntry> DirectRounds::EntriesOf(const std::vector<uint32_t>& ids) {
  std::vector<std::string> keys;
  std::vector<plan::FusionCandidate> candidates;
  for (uint32_t id : ids) {
    auto it = names_.find(id);
    if (it == names_.end()) {
      // Not in this node's state: the negotiator finds it not ready here
      // and ends the job (the rounds never run a name a node lacks).
      keys.push_back(absl::StrCat("0:<cache id ", id, ">"));
      candidates.push_back({plan::TensorDesc{}, {}});
      continue;
    }
    keys.push_back(std::move(it->second.key));
    candidates.push_back({it->second.desc, {}});
    names_.erase(it);
  }
  std::vector<PlannedEntry> entries;
  for (const plan::FusionGroup& g : plan::GroupForFusion(candidates, options_.fusion_threshold)) {
    PlannedEntry e;
    for (size_t m : g.members) e.names.push_back(keys[m]);
    entries.push_back(std::move(e));
  }
  return entries;
}

absl::flat_hash_map<std::string, std::vector<int>> DirectRounds::MissingRanks() const {
  absl::flat_hash_map<std::string, std::vector<int>> missing;
  for (const auto& [id, name] : names_) {
    std::vector<int>& ranks = missing[name.key];
    for (int n : rounds_.NodesWithout(id)) {
      if (n < 0 || n >= nodes_) continue;
      ranks.insert(ranks.end(), options_.node_ranks[n].begin(), options_.node_ranks[n].end());
    }
    std::sort(ranks.begin(), ranks.end());
  }
  return missing;
}

}  // namespace kolo::daemon
