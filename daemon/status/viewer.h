// Who is asking the Status and Admin services, and what they may see.
//
// - The admin token ("authorization: Bearer <token>") sees and may do
//   everything.
// - On the Unix socket, an identity ticket ("kolo-handoff: <ticket>", from
//   the handoff socket, see common/handoff.h) names the caller's uid as the
//   kernel reported it: root sees everything, another user the details of
//   their own jobs.
// - Anyone else (e.g. a TCP caller without the token) sees node-level facts
//   only: no job, pid or session.
//
// Thread-safety: thread-safe (the table locks itself).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "common/handoff.h"
#include "daemon/session/handoff_table.h"

namespace kolo::daemon {

struct Viewer {
  bool everything = false;
  std::optional<uid_t> uid;
  bool MaySee(uid_t owner) const { return everything || (uid.has_value() && *uid == owner); }
};

// OK when the call carries the admin token; UNAUTHENTICATED without any,
// PERMISSION_DENIED with a wrong one.
grpc::Status CheckAdminToken(const grpc::ServerContext& context, const std::string& token);

class ViewerResolver {
 public:
  // `identities` must outlive the resolver.
  ViewerResolver(std::string admin_token, HandoffTable* identities)
      : admin_token_(std::move(admin_token)), identities_(identities) {}

  // PERMISSION_DENIED for a wrong admin token or an unknown identity ticket
  // (a caller that sends credentials learns that they failed).
  absl::StatusOr<Viewer> Resolve(const grpc::ServerContext& context) const;

 private:
  const std::string admin_token_;
  HandoffTable* const identities_;
};

}  // namespace kolo::daemon
