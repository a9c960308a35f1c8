#include "daemon/coordinator/membership.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

kolo::v1::Hello HelloOf(const std::string& node, std::vector<int> ranks,
                        const std::string& token = "tok", int size = 4) {
  kolo::v1::Hello h;
  h.set_node(node);
  h.set_job_token(token);
  h.set_size(size);
  for (int r : ranks) h.add_ranks(r);
  return h;
}

TEST(MembershipTest, TheWelcomeOrdersNodesByTheirLowestRank) {
  Membership m("job", "tok", 4);
  absl::StatusOr<int> b = m.Admit(HelloOf("b", {3, 2}), nullptr);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_FALSE(m.complete());
  absl::StatusOr<int> a = m.Admit(HelloOf("a", {1, 0}), nullptr);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(m.complete());

  kolo::v1::Welcome welcome;
  m.Welcome(&welcome);
  EXPECT_TRUE(m.welcomed());
  ASSERT_EQ(m.nodes(), 2);
  EXPECT_EQ(m.MemberOf(0), *a);
  EXPECT_EQ(m.OfNode(1).node, "b");
  EXPECT_EQ(m.OfNode(1).ranks, std::vector<int>({2, 3}));
  ASSERT_EQ(welcome.nodes_size(), 2);
  EXPECT_EQ(welcome.nodes(0).node(), "a");
  EXPECT_EQ(m.DescribeNode(1), "ranks 2-3 (node b)");
  EXPECT_EQ(m.DescribeNode(7), "an unknown node");

  plan::ProcessSetRegistry sets(4);
  EXPECT_EQ(m.NodesOfSet(sets, 0), 2);
  absl::StatusOr<int> set = sets.Add({2, 3});
  ASSERT_TRUE(set.ok());
  EXPECT_EQ(m.NodesOfSet(sets, *set), 1);
}

TEST(MembershipTest, AHelloThatCannotJoinIsRefusedWithWhy) {
  Membership m("job", "tok", 4);
  EXPECT_EQ(m.Admit(HelloOf("x", {0}, "wrong"), nullptr).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(m.Admit(HelloOf("x", {0}, "tok", 8), nullptr).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(m.Admit(HelloOf("x", {}), nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(m.Admit(HelloOf("a", {0, 1}), nullptr).ok());
  absl::Status taken = m.Admit(HelloOf("b", {1, 2}), nullptr).status();
  EXPECT_EQ(taken.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(absl::StrContains(taken.message(), "claims rank 1")) << taken;
  EXPECT_EQ(m.Admit(HelloOf("b", {9}), nullptr).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(m.Find(42), nullptr);
}

TEST(MembershipTest, DeviceLayoutsAreCheckedAgainstTheRanksANodeHosts) {
  Membership m("job", "tok", 2);
  absl::StatusOr<int> a = m.Admit(HelloOf("a", {0}, "tok", 2), nullptr);
  absl::StatusOr<int> b = m.Admit(HelloOf("b", {1}, "tok", 2), nullptr);
  ASSERT_TRUE(a.ok() && b.ok());
  kolo::v1::Welcome welcome;
  m.Welcome(&welcome);
  EXPECT_EQ(m.DeviceLayouts().status().code(), absl::StatusCode::kInternal);
  for (int id : {*a, *b}) {
    Membership::Member* member = m.Find(id);
    member->has_devices = true;
    member->devices.add_ranks(member->ranks.front());
    member->devices.add_devices(0);
  }
  absl::StatusOr<std::vector<RankDevices>> layouts = m.DeviceLayouts();
  ASSERT_TRUE(layouts.ok()) << layouts.status();
  EXPECT_EQ(layouts->size(), 2u);
  m.Find(*b)->devices.set_ranks(0, 0);  // a rank node b does not host
  EXPECT_EQ(m.DeviceLayouts().status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kolo::daemon
