#include "daemon/job/rendezvous_client.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "daemon/wire/peer_protocol.h"
#include "proto/kolo/v1/peer.grpc.pb.h"

namespace kolo::daemon {
namespace {
// Channels kept at once (the leaders of the elastic jobs here).
constexpr size_t kMaxChannels = 256;
// How long Refuses may take.
constexpr absl::Duration kRefusesWithin = absl::Milliseconds(500);
}  // namespace

GrpcRendezvous::GrpcRendezvous(std::shared_ptr<grpc::ChannelCredentials> credentials,
                               absl::Duration deadline)
    : credentials_(std::move(credentials)), deadline_(deadline) {}

std::shared_ptr<grpc::Channel> GrpcRendezvous::ChannelTo(const std::string& address) {
  absl::MutexLock l(&mu_);
  auto it = channels_.find(address);
  if (it != channels_.end()) return it->second;
  if (channels_.size() >= kMaxChannels) channels_.erase(channels_.begin());
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  auto channel = grpc::CreateCustomChannel(address, credentials_, args);
  channels_[address] = channel;
  return channel;
}

absl::StatusOr<kolo::v1::ElasticFormed> GrpcRendezvous::Call(
    const std::string& address, const kolo::v1::ElasticReport& report) {
  auto stub = kolo::v1::Peer::NewStub(ChannelTo(address));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoNanoseconds(deadline_));
  // The job goes in the metadata too: the leader reads nothing of a call
  // before it names a job the leader knows (peer_service.h).
  context.AddMetadata(kJobIdKey, report.job_id());
  context.AddMetadata(kJobTokenKey, report.job_token());
  kolo::v1::ElasticFormed formed;
  grpc::Status s = stub->Rendezvous(&context, report, &formed);
  if (!s.ok()) {
    absl::Status status = FromGrpcStatus(s);
    return absl::Status(status.code(),
                        absl::StrCat("the membership leader at ", address, ": ", status.message()));
  }
  return formed;
}

bool GrpcRendezvous::Refuses(const std::string& address) {
  std::shared_ptr<grpc::Channel> channel = ChannelTo(address);
  const auto deadline =
      std::chrono::system_clock::now() + absl::ToChronoNanoseconds(kRefusesWithin);
  grpc_connectivity_state state = channel->GetState(/*try_to_connect=*/true);
  while (state != GRPC_CHANNEL_READY && state != GRPC_CHANNEL_TRANSIENT_FAILURE &&
         state != GRPC_CHANNEL_SHUTDOWN) {
    if (!channel->WaitForStateChange(state, deadline)) return false;  // cannot tell
    state = channel->GetState(/*try_to_connect=*/true);
  }
  return state != GRPC_CHANNEL_READY;
}

}  // namespace kolo::daemon
