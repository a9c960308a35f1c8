// The members of one job's coordinator: the daemons that said Hello, the
// ranks each hosts, the order of the nodes the Welcome fixes, and what each
// said last (when it was last heard from, its GPU layout).
//
// Thread-safety: not thread-safe; the coordinator's lock guards it.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/backend/device_comm_plan.h"
#include "daemon/coordinator/member_sink.h"
#include "daemon/plan/process_set_registry.h"
#include "proto/kolo/v1/peer.pb.h"

namespace kolo::daemon {

class Membership {
 public:
  struct Member {
    std::string node;
    std::vector<int> ranks;  // ascending
    std::string ucx_address;
    std::shared_ptr<MemberSink> sink;
    // Set once it reported over the lane: where its plans go.
    std::shared_ptr<MemberSink> lane_sink;
    int node_index = -1;
    absl::Time last_heard;
    bool connected = true;
    // Where its ranks keep device tensors (sent with its first one).
    bool has_devices = false;
    kolo::v1::DeviceLayout devices;
  };

  Membership(std::string job_id, std::string token, int size);

  // A member said Hello: its token, the job's size and its ranks (in range,
  // hosted nowhere else) are checked, and it gets a member id, stable for
  // its lifetime; or the reason it is refused.
  absl::StatusOr<int> Admit(const kolo::v1::Hello& hello, std::shared_ptr<MemberSink> sink);
  // Every rank has its member.
  bool complete() const;
  bool welcomed() const { return welcomed_; }
  // Fixes the node order (the node hosting rank 0 first, then by lowest
  // rank: the same on every daemon) and adds the nodes to `welcome`.
  void Welcome(kolo::v1::Welcome* welcome);

  // Null for an unknown member.
  Member* Find(int member);
  const std::map<int, Member>& all() const { return members_; }
  // After the Welcome: the nodes, and the member of node `node_index`.
  int nodes() const { return static_cast<int>(node_members_.size()); }
  bool HasNode(int node_index) const { return node_index >= 0 && node_index < nodes(); }
  int MemberOf(int node_index) const { return node_members_[node_index]; }
  const Member& OfNode(int node_index) const { return members_.at(node_members_[node_index]); }
  // "ranks 0-3 (node a)", for messages.
  std::string DescribeNode(int node_index) const;
  static std::string Describe(const Member& m);
  // How many nodes host a member of `process_set` (every node for 0).
  int NodesOfSet(const plan::ProcessSetRegistry& sets, int process_set) const;
  // The GPUs of every node's ranks, in node order, checked against the
  // ranks each hosts.
  absl::StatusOr<std::vector<RankDevices>> DeviceLayouts() const;

 private:
  const std::string job_id_;
  const std::string token_;
  const int size_;
  std::map<int, Member> members_;
  int next_member_ = 0;
  std::vector<int> rank_owner_;    // member id per rank, -1: none yet
  std::vector<int> node_members_;  // member id by node index
  bool welcomed_ = false;
};

}  // namespace kolo::daemon
