#include "daemon/coordinator/membership.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/rank_ranges.h"
#include "common/secret_compare.h"

namespace kolo::daemon {

Membership::Membership(std::string job_id, std::string token, int size)
    : job_id_(std::move(job_id)), token_(std::move(token)), size_(size) {
  rank_owner_.assign(size, -1);
}

absl::StatusOr<int> Membership::Admit(const kolo::v1::Hello& hello,
                                      std::shared_ptr<MemberSink> sink) {
  if (!SecretsEqual(hello.job_token(), token_)) {
    return absl::PermissionDeniedError(
        absl::StrCat("job ", job_id_, ": node ", hello.node(), " presented a wrong job token"));
  }
  if (hello.size() != size_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id_, " has size ", size_, ", node ", hello.node(), " says ", hello.size()));
  }
  if (welcomed_) {
    return absl::AlreadyExistsError(absl::StrCat("job ", job_id_, " already has all its nodes"));
  }
  std::vector<int> ranks(hello.ranks().begin(), hello.ranks().end());
  std::sort(ranks.begin(), ranks.end());
  if (ranks.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("node ", hello.node(), " hosts no rank"));
  }
  for (int r : ranks) {
    if (r < 0 || r >= size_ || rank_owner_[r] != -1) {
      return absl::AlreadyExistsError(absl::StrCat("job ", job_id_, ": node ", hello.node(),
                                                   " claims rank ", r,
                                                   ", which is out of range or hosted elsewhere"));
    }
  }
  const int member_id = next_member_++;
  for (int r : ranks) rank_owner_[r] = member_id;
  Member m;
  m.node = hello.node();
  m.ranks = std::move(ranks);
  m.ucx_address = hello.ucx_address();
  m.sink = std::move(sink);
  m.last_heard = absl::Now();
  members_[member_id] = std::move(m);
  return member_id;
}

bool Membership::complete() const {
  return std::all_of(rank_owner_.begin(), rank_owner_.end(), [](int o) { return o >= 0; });
}

void Membership::Welcome(kolo::v1::Welcome* welcome) {
  welcomed_ = true;
  std::vector<int> ids;
  for (const auto& [id, m] : members_) ids.push_back(id);
  std::sort(ids.begin(), ids.end(), [this](int a, int b) {
    return members_.at(a).ranks.front() < members_.at(b).ranks.front();
  });
  node_members_ = ids;
  for (size_t i = 0; i < ids.size(); ++i) {
    Member& m = members_.at(ids[i]);
    m.node_index = static_cast<int>(i);
    auto* e = welcome->add_nodes();
    e->set_node(m.node);
    for (int r : m.ranks) e->add_ranks(r);
    e->set_ucx_address(m.ucx_address);
  }
}

Membership::Member* Membership::Find(int member) {
  auto it = members_.find(member);
  return it == members_.end() ? nullptr : &it->second;
}

std::string Membership::Describe(const Member& m) {
  return absl::StrCat("ranks ", FormatRankRanges(m.ranks), " (node ", m.node, ")");
}

std::string Membership::DescribeNode(int node_index) const {
  if (!HasNode(node_index)) return "an unknown node";
  return Describe(OfNode(node_index));
}

int Membership::NodesOfSet(const plan::ProcessSetRegistry& sets, int process_set) const {
  const std::vector<int>* ranks = sets.Members(process_set);
  if (process_set == 0 || ranks == nullptr) return nodes();
  std::vector<bool> hosts(node_members_.size(), false);
  for (int r : *ranks) {
    const int member = rank_owner_[r];
    if (member >= 0) hosts[members_.at(member).node_index] = true;
  }
  return static_cast<int>(std::count(hosts.begin(), hosts.end(), true));
}

absl::StatusOr<std::vector<RankDevices>> Membership::DeviceLayouts() const {
  std::vector<RankDevices> nodes;
  for (int member : node_members_) {
    const Member& m = members_.at(member);
    if (!m.has_devices) {
      return absl::InternalError(
          absl::StrCat("node ", m.node, " sent a device tensor without its GPU layout"));
    }
    const kolo::v1::DeviceLayout& layout = m.devices;
    if (layout.ranks_size() != layout.devices_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("node ", m.node, " sent a malformed GPU layout"));
    }
    RankDevices placed;
    for (int i = 0; i < layout.ranks_size(); ++i) {
      const int rank = layout.ranks(i);
      if (rank < 0 || rank >= size_ || rank_owner_[rank] != member) {
        return absl::InvalidArgumentError(
            absl::StrCat("node ", m.node, " placed rank ", rank, ", which it does not host"));
      }
      placed.emplace_back(rank, layout.devices(i));
    }
    nodes.push_back(std::move(placed));
  }
  return nodes;
}

}  // namespace kolo::daemon
