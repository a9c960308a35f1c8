#include "daemon/status/call_credentials.h"

#include <string_view>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/handoff.h"
#include "common/secret_compare.h"
#include "proto/kolo/v1/node.grpc.pb.h"

namespace kolo::daemon {
namespace {

absl::string_view Value(const CallStart& call, absl::string_view key) {
  if (call.metadata == nullptr) return {};
  auto it = call.metadata->find(grpc::string_ref(key.data(), key.size()));
  if (it == call.metadata->end()) return {};
  return absl::string_view(it->second.data(), it->second.size());
}

}  // namespace

Presented JudgeCall(const CallStart& call, const CallCredentialRules& rules, absl::Time now) {
  absl::string_view authorization = Value(call, "authorization");
  if (absl::ConsumePrefix(&authorization, "Bearer ") && !rules.admin_token.empty() &&
      SecretsEqual(std::string_view(authorization.data(), authorization.size()),
                   rules.admin_token)) {
    return Presented::kAdminToken;
  }
  if (rules.tickets != nullptr) {
    const absl::string_view ticket = Value(call, kHandoffMetadata);
    if (ticket.size() == kHandoffTicketChars) {
      auto caller = rules.tickets->Identify(std::string(ticket), now);
      if (caller.ok() && call.peer_uid.has_value() && caller->uid == *call.peer_uid) {
        return Presented::kTicket;
      }
    }
  }
  if (rules.session_calls && call.unary) {
    absl::string_view method = call.method;
    if (absl::ConsumePrefix(&method, "/") &&
        absl::ConsumePrefix(&method, kolo::v1::Node::service_full_name()) &&
        absl::StartsWith(method, "/")) {
      return Presented::kSessionCall;
    }
  }
  return Presented::kNothing;
}

}  // namespace kolo::daemon
