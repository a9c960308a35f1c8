#include "daemon/status/call_credentials.h"

#include <unistd.h>

#include <map>
#include <string>

#include "absl/time/clock.h"
#include "common/handoff.h"
#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

using Metadata = std::multimap<grpc::string_ref, grpc::string_ref>;

class JudgeCallTest : public ::testing::Test {
 protected:
  Presented Judge(const std::string& method, bool unary, const Metadata& md,
                  std::optional<uid_t> uid = std::nullopt) {
    CallStart call;
    call.method = method;
    call.unary = unary;
    call.metadata = &md;
    call.peer_uid = uid;
    return JudgeCall(call, rules_, absl::Now());
  }

  HandoffTable table_{HandoffLimits{}};
  CallCredentialRules rules_{"0123456789abcdef0123", &table_, true};
};

TEST_F(JudgeCallTest, TheAdminTokenCounts) {
  const std::string good = "Bearer 0123456789abcdef0123";
  const std::string bad = "Bearer 0123456789abcdef0124";
  EXPECT_EQ(Judge("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", false,
                  {{"authorization", good}}),
            Presented::kAdminToken);
  EXPECT_EQ(Judge("/kolo.v1.Status/GetStatus", true, {{"authorization", bad}}),
            Presented::kNothing);
  EXPECT_EQ(Judge("/kolo.v1.Status/GetStatus", true, {}), Presented::kNothing);
}

TEST_F(JudgeCallTest, AKnownTicketOfTheConnectionsUidCounts) {
  Handoff handoff;
  handoff.caller.uid = getuid();
  auto ticket = table_.Deposit(std::move(handoff), absl::Now());
  ASSERT_TRUE(ticket.ok()) << ticket.status();
  const Metadata md = {{kHandoffMetadata, *ticket}};
  EXPECT_EQ(Judge("/grpc.health.v1.Health/Watch", false, md, getuid()), Presented::kTicket);
  // Another uid's connection, or no uid (TCP), does not get it.
  EXPECT_EQ(Judge("/grpc.health.v1.Health/Watch", false, md, getuid() + 1), Presented::kNothing);
  EXPECT_EQ(Judge("/grpc.health.v1.Health/Watch", false, md), Presented::kNothing);
  const std::string forged(kHandoffTicketChars, 'a');
  EXPECT_EQ(Judge("/grpc.health.v1.Health/Watch", false, {{kHandoffMetadata, forged}}, getuid()),
            Presented::kNothing);
  // Tickets count only where the rules take them.
  rules_.tickets = nullptr;
  EXPECT_EQ(Judge("/grpc.health.v1.Health/Watch", false, md, getuid()), Presented::kNothing);
}

TEST_F(JudgeCallTest, NodesUnaryCallsAreASessions) {
  EXPECT_EQ(Judge("/kolo.v1.Node/Detach", true, {}), Presented::kSessionCall);
  EXPECT_EQ(Judge("/kolo.v1.Node/Attach", false, {}), Presented::kNothing);
  EXPECT_EQ(Judge("/kolo.v1.NodeX/Detach", true, {}), Presented::kNothing);
  rules_.session_calls = false;
  EXPECT_EQ(Judge("/kolo.v1.Node/Detach", true, {}), Presented::kNothing);
}

}  // namespace
}  // namespace kolo::daemon
