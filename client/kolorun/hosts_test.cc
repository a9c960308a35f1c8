#include "client/kolorun/hosts.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kolo::kolorun {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string ErrorOf(const std::string& spec) {
  absl::StatusOr<std::vector<HostSlots>> hosts = ParseHostList(spec);
  EXPECT_FALSE(hosts.ok()) << spec;
  if (hosts.ok()) return "";
  EXPECT_EQ(hosts.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(hosts.status().message());
}

TEST(ParseHostListTest, HostsWithAndWithoutSlots) {
  auto hosts = ParseHostList("hostA:2,hostB,user@hostC:16,10.0.0.7:3");
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_THAT(*hosts, ElementsAre(HostSlots{"hostA", 2}, HostSlots{"hostB", 1},
                                  HostSlots{"user@hostC", 16}, HostSlots{"10.0.0.7", 3}));
}

TEST(ParseHostListTest, Ipv6Literals) {
  auto hosts = ParseHostList("::1,[fe80::2]:4,[fe80::3]");
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_THAT(*hosts,
              ElementsAre(HostSlots{"::1", 1}, HostSlots{"fe80::2", 4}, HostSlots{"fe80::3", 1}));
}

TEST(ParseHostListTest, BadSlots) {
  EXPECT_THAT(ErrorOf("hostA:0"), HasSubstr("slots \"0\""));
  EXPECT_THAT(ErrorOf("hostA:-1"), HasSubstr("slots \"-1\""));
  EXPECT_THAT(ErrorOf("hostA:two"), HasSubstr("-H entry \"hostA:two\""));
  EXPECT_THAT(ErrorOf("hostA:"), HasSubstr("slots \"\""));
  EXPECT_THAT(ErrorOf("hostA:2x"), HasSubstr("slots"));
  EXPECT_THAT(ErrorOf("hostA:99999999999"), HasSubstr("slots"));
  EXPECT_THAT(ErrorOf("[fe80::1]2"), HasSubstr("expected :SLOTS"));
  EXPECT_THAT(ErrorOf("[fe80::1:2"), HasSubstr("no ]"));
}

TEST(ParseHostListTest, EmptyListsEntriesAndHosts) {
  EXPECT_THAT(ErrorOf(""), HasSubstr("empty"));
  EXPECT_THAT(ErrorOf("  "), HasSubstr("empty"));
  EXPECT_THAT(ErrorOf("a,,b"), HasSubstr("empty entry"));
  EXPECT_THAT(ErrorOf("a,"), HasSubstr("empty entry"));
  EXPECT_THAT(ErrorOf(":2"), HasSubstr("empty host name"));
  EXPECT_THAT(ErrorOf("[]:2"), HasSubstr("empty host name"));
}

TEST(ParseHostListTest, HostsSshWouldMisread) {
  EXPECT_THAT(ErrorOf("-oProxyCommand=x:1"), HasSubstr("must not start with '-'"));
  EXPECT_THAT(ErrorOf("host a:1"), HasSubstr("spaces"));
  EXPECT_THAT(ErrorOf("host\na"), HasSubstr("spaces"));
}

TEST(ParseHostListTest, HostListedTwice) {
  EXPECT_THAT(ErrorOf("a:1,b:1,A:2"), HasSubstr("A is listed twice"));
}

TEST(IsThisMachineTest, LoopbackNamesAndHostname) {
  for (const char* host :
       {"localhost", "LocalHost", "127.0.0.1", "::1", "node7", "node7.cluster.example", "NODE7"}) {
    EXPECT_TRUE(IsThisMachine(host, "node7.cluster.example")) << host;
  }
  for (const char* host : {"node8", "node7.other", "user@localhost", "node", "127.0.0.2"}) {
    EXPECT_FALSE(IsThisMachine(host, "node7.cluster.example")) << host;
  }
  EXPECT_TRUE(IsThisMachine("localhost", ""));
  EXPECT_FALSE(IsThisMachine("", ""));
}

TEST(AssignRanksTest, FillsHostsInOrder) {
  auto placed = AssignRanks({{"hostA", 2}, {"hostB", 2}}, 4, "here");
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_THAT(
      *placed,
      ElementsAre(RankPlacement{"hostA", false, 0, 2}, RankPlacement{"hostA", false, 1, 2},
                  RankPlacement{"hostB", false, 0, 2}, RankPlacement{"hostB", false, 1, 2}));
  EXPECT_EQ(HostsUsed(*placed), 2);
}

TEST(AssignRanksTest, FewerRanksThanSlotsLeaveLastHostsShort) {
  auto placed = AssignRanks({{"localhost", 2}, {"b", 3}, {"c", 4}}, 3, "here");
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_THAT(*placed,
              ElementsAre(RankPlacement{"localhost", true, 0, 2},
                          RankPlacement{"localhost", true, 1, 2}, RankPlacement{"b", false, 0, 1}));
  EXPECT_EQ(HostsUsed(*placed), 2);
  placed = AssignRanks({{"a", 4}, {"b", 4}}, 2, "here");
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(HostsUsed(*placed), 1);
}

TEST(AssignRanksTest, NoHostsMeansAllHere) {
  auto placed = AssignRanks({}, 2, "here");
  ASSERT_TRUE(placed.ok());
  EXPECT_THAT(*placed, ElementsAre(RankPlacement{"", true, 0, 2}, RankPlacement{"", true, 1, 2}));
}

TEST(AssignRanksTest, TooManyRanks) {
  auto placed = AssignRanks({{"a", 2}, {"b", 1}}, 4, "here");
  ASSERT_FALSE(placed.ok());
  EXPECT_EQ(placed.status().message(), "-np 4 is more than the 3 slots of the -H host list");
}

TEST(AssignRanksTest, ThisMachineTwice) {
  auto placed = AssignRanks({{"localhost", 1}, {"here", 1}}, 2, "here");
  ASSERT_FALSE(placed.ok());
  EXPECT_THAT(std::string(placed.status().message()),
              HasSubstr("localhost and here are both this machine"));
}

TEST(CoordinatorAddressTest, RankZerosHostAndPeerPort) {
  EXPECT_EQ(*CoordinatorAddress({"hostA", false, 0, 2}, "here", 7371), "hostA:7371");
  EXPECT_EQ(*CoordinatorAddress({"me@hostA", false, 0, 2}, "here", 9000), "hostA:9000");
  EXPECT_EQ(*CoordinatorAddress({"fe80::1", false, 0, 1}, "here", 7371), "[fe80::1]:7371");
  EXPECT_EQ(*CoordinatorAddress({"here", true, 0, 1}, "here", 7371), "here:7371");
}

TEST(CoordinatorAddressTest, LoopbackNameIsReplacedByHostname) {
  EXPECT_EQ(*CoordinatorAddress({"localhost", true, 0, 1}, "node7", 7371), "node7:7371");
  EXPECT_EQ(*CoordinatorAddress({"::1", true, 0, 1}, "node7", 7371), "node7:7371");
  auto unknown = CoordinatorAddress({"127.0.0.1", true, 0, 1}, "", 7371);
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("--coordinator"));
}

}  // namespace
}  // namespace kolo::kolorun
