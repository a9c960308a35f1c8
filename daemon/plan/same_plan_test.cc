// The one-node planner (PlanFusion) and the multi-node Coordinator group
// the same ready names, in the same order, into the same responses with
// the same member offsets.
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "daemon/coordinator/coordinator.h"
#include "daemon/plan/fusion.h"
#include "daemon/plan/fusion_planner.h"
#include "daemon/plan/tensor_meta.h"
#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

constexpr uint64_t kThreshold = 1024;

struct RecordingSink : MemberSink {
  void Send(std::shared_ptr<const kolo::v1::CoordinatorMessage> message) override {
    const kolo::v1::CoordinatorMessage& m = *message;
    if (m.has_plan()) plans.push_back(m.plan());
  }
  std::vector<kolo::v1::Plan> plans;
};

struct Spec {
  std::string name;
  uint64_t bytes = 64;
  CollectiveKind kind = CollectiveKind::kAllreduce;
  DType dtype = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
};

// `spec` as submitted by `ranks`, all agreeing.
ReadySet SetOf(const Spec& spec, const std::vector<int>& ranks) {
  ReadySet set;
  set.name = spec.name;
  for (int rank : ranks) {
    Request r;
    r.rank = rank;
    r.name = spec.name;
    r.kind = spec.kind;
    r.dtype = spec.dtype;
    r.op = spec.op;
    r.root_rank = spec.root;
    r.bytes = spec.bytes;
    r.shape = {static_cast<int64_t>(spec.bytes / DTypeSize(spec.dtype))};
    set.requests.push_back(std::move(r));
  }
  return set;
}

// A response as names and member offsets.
struct Planned {
  std::vector<std::string> names;
  std::vector<uint64_t> offsets;
  uint64_t total_bytes = 0;
  bool operator==(const Planned&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Planned& p) {
  os << "{";
  for (size_t i = 0; i < p.names.size(); ++i) os << p.names[i] << "@" << p.offsets[i] << " ";
  return os << "total " << p.total_bytes << "}";
}

std::vector<Planned> OnOneNode(const std::vector<Spec>& specs) {
  std::vector<ReadySet> ready;
  for (const Spec& s : specs) ready.push_back(SetOf(s, {0, 1, 2, 3}));
  std::vector<Planned> out;
  for (const Response& r : PlanFusion(std::move(ready), kThreshold)) {
    Planned& p = out.emplace_back();
    for (const FusedMember& m : r.members) {
      p.names.push_back(m.set.name);
      p.offsets.push_back(m.offset);
    }
    p.total_bytes = r.total_bytes;
  }
  return out;
}

// Two nodes (ranks 0-1 and 2-3) report every name in `specs` order; the
// nodes lay each planned response out with the shared layout.
std::vector<Planned> AcrossNodes(const std::vector<Spec>& specs) {
  Coordinator coordinator("job", "tok", 4, CoordinatorOptions{kThreshold, 64, {}});
  auto a = std::make_shared<RecordingSink>();
  auto b = std::make_shared<RecordingSink>();
  std::vector<int> ids;
  for (auto [node, ranks, sink] :
       {std::tuple{"A", std::vector<int>{0, 1}, a}, std::tuple{"B", std::vector<int>{2, 3}, b}}) {
    kolo::v1::Hello hello;
    hello.set_job_id("job");
    hello.set_job_token("tok");
    hello.set_node(node);
    hello.set_size(4);
    for (int r : ranks) hello.add_ranks(r);
    absl::StatusOr<int> id = coordinator.AddMember(hello, sink);
    EXPECT_TRUE(id.ok()) << id.status();
    ids.push_back(id.value_or(-1));
  }
  std::map<std::string, uint64_t> bytes;
  kolo::v1::Ready from_a, from_b;
  for (const Spec& s : specs) {
    *from_a.add_tensors() = plan::MetaOf(SetOf(s, {0, 1}), 4);
    *from_b.add_tensors() = plan::MetaOf(SetOf(s, {2, 3}), 4);
    bytes[s.name] = s.bytes;
  }
  coordinator.OnReady(ids[0], from_a);
  coordinator.OnReady(ids[1], from_b);
  std::vector<Planned> out;
  EXPECT_EQ(a->plans.size(), 1u);
  if (a->plans.empty()) return out;
  for (const kolo::v1::PlannedResponse& r : a->plans[0].responses()) {
    EXPECT_EQ(r.error_code(), 0) << r.error_message();
    Planned& p = out.emplace_back();
    std::vector<uint64_t> member_bytes;
    for (const kolo::v1::PlanMember& m : r.members()) {
      p.names.push_back(m.name());
      member_bytes.push_back(bytes[m.name()]);
    }
    plan::FusionLayout layout = plan::LayOut(member_bytes);
    p.offsets = layout.offsets;
    p.total_bytes = layout.total_bytes;
  }
  return out;
}

TEST(SamePlanTest, OneNodeAndManyNodesGroupAndLayOutAlike) {
  constexpr auto kB = CollectiveKind::kBroadcast;
  constexpr auto kAg = CollectiveKind::kAllgather;
  constexpr auto kA2a = CollectiveKind::kAlltoall;
  constexpr auto kRs = CollectiveKind::kReducescatter;
  const std::vector<Spec> specs = {
      {.name = "w1", .bytes = 100},
      {.name = "h1", .bytes = 10, .dtype = DType::kFloat16},
      {.name = "b0", .bytes = 40, .kind = kB, .root = 0},
      {.name = "w2", .bytes = 400},
      {.name = "ag1", .bytes = 96, .kind = kAg},
      {.name = "b1", .bytes = 40, .kind = kB, .root = 1},
      {.name = "ag2", .bytes = 96, .kind = kAg},
      {.name = "w3", .bytes = 400},
      {.name = "big", .bytes = 4 * kThreshold},
      {.name = "max", .bytes = 8, .op = ReduceOp::kMax},
      {.name = "b2", .bytes = 40, .kind = kB, .root = 0},
      {.name = "a2a", .bytes = 64, .kind = kA2a},
      {.name = "rs1", .bytes = 64, .kind = kRs},
      {.name = "w4", .bytes = 24},
      {.name = "rs2", .bytes = 64, .kind = kRs},
      {.name = "h2", .bytes = 10, .dtype = DType::kFloat16},
      {.name = "w5", .bytes = 300},
  };
  const std::vector<Planned> one = OnOneNode(specs);
  const std::vector<Planned> many = AcrossNodes(specs);
  EXPECT_EQ(one, many);
  // And the grouping is the rule's, not merely the same by accident.
  ASSERT_FALSE(one.empty());
  // w4 would end the first group past the threshold (at 1048).
  EXPECT_EQ(one[0].names, (std::vector<std::string>{"w1", "w2", "w3"}));
  EXPECT_EQ(one[0].offsets, (std::vector<uint64_t>{0, 128, 576}));
  EXPECT_EQ(one.size(), 11u);
}

}  // namespace
}  // namespace kolo::daemon
