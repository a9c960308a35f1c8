#include "daemon/status/viewer.h"

#include "common/grpc_status.h"
#include "common/secret_compare.h"
#include "spdlog/spdlog.h"

namespace kolo::daemon {
namespace {

std::optional<std::string> Metadata(const grpc::ServerContext& context, const char* key) {
  const auto& md = context.client_metadata();
  auto it = md.find(key);
  if (it == md.end()) return std::nullopt;
  return std::string(it->second.data(), it->second.size());
}

}  // namespace

grpc::Status CheckAdminToken(const grpc::ServerContext& context, const std::string& token) {
  std::optional<std::string> value = Metadata(context, "authorization");
  if (!value.has_value()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "admin calls need \"authorization: Bearer <token>\" "
                        "(the node's admin token file)");
  }
  constexpr char kPrefix[] = "Bearer ";
  if (value->rfind(kPrefix, 0) != 0 || !SecretsEqual(value->substr(sizeof(kPrefix) - 1), token)) {
    spdlog::warn("admin token refused from {}", context.peer());
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "wrong admin token");
  }
  return grpc::Status::OK;
}

absl::StatusOr<Viewer> ViewerResolver::Resolve(const grpc::ServerContext& context) const {
  Viewer viewer;
  if (Metadata(context, "authorization").has_value()) {
    grpc::Status admin = CheckAdminToken(context, admin_token_);
    if (!admin.ok()) return FromGrpcStatus(admin);
    viewer.everything = true;
    return viewer;
  }
  std::optional<std::string> ticket = Metadata(context, kHandoffMetadata);
  if (!ticket.has_value()) return viewer;
  // Identity tickets are issued only on the Unix socket's handoff; one that
  // arrives over TCP is refused rather than trusted. (kolod accepts on the
  // socket itself and hands gRPC each connection, which it then names
  // "fd:N".)
  const std::string peer = context.peer();
  if (peer.rfind("unix:", 0) != 0 && peer.rfind("fd:", 0) != 0) {
    return absl::PermissionDeniedError("identity tickets are accepted on kolod's Unix socket only");
  }
  auto caller = identities_->Identify(*ticket, absl::Now());
  if (!caller.ok()) return caller.status();
  viewer.uid = caller->uid;
  viewer.everything = caller->uid == 0;
  return viewer;
}

}  // namespace kolo::daemon
