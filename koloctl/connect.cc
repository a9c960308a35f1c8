#include "koloctl/connect.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace kolo::koloctl {
namespace {

absl::Status Unreachable(const std::string& target, const std::string& cause) {
  return absl::UnavailableError(absl::StrCat("no kolod answering on ", target,
                                             " (is it running? --socket/--address): ", cause));
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::Channel>> Connect(const std::string& target,
                                                       absl::Duration timeout) {
  if (absl::StartsWith(target, "unix:")) {
    // gRPC would retry a missing socket until the deadline; say so at once.
    const std::string path = target.substr(5);
    if (path.size() >= sizeof(sockaddr_un::sun_path)) {
      return Unreachable(target,
                         absl::StrCat("socket path is ", path.size(), " bytes, longer than the ",
                                      sizeof(sockaddr_un::sun_path) - 1, " a Unix socket allows"));
    }
    struct stat st;
    if (stat(path.c_str(), &st) != 0) return Unreachable(target, std::strerror(errno));
    if (!S_ISSOCK(st.st_mode)) return Unreachable(target, absl::StrCat(path, " is not a socket"));
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  const auto deadline = absl::ToChronoTime(absl::Now() + timeout);
  grpc_connectivity_state state = channel->GetState(/*try_to_connect=*/true);
  while (state != GRPC_CHANNEL_READY) {
    if (state == GRPC_CHANNEL_TRANSIENT_FAILURE || state == GRPC_CHANNEL_SHUTDOWN) {
      return Unreachable(target, "connection failed");
    }
    if (!channel->WaitForStateChange(state, deadline)) {
      return Unreachable(target,
                         absl::StrCat("no connection within ", absl::FormatDuration(timeout)));
    }
    state = channel->GetState(/*try_to_connect=*/true);
  }
  return channel;
}

}  // namespace kolo::koloctl
