// ConfigurePeerServer (declared in peer_service.h): the gRPC server options
// that bound what a peer costs before its stream has shown a job token.
#include <grpcpp/grpcpp.h>
#include <grpcpp/resource_quota.h>

#include "daemon/wire/peer_service.h"

namespace kolo::daemon {
namespace {

// Per-stream receive window: what a peer may have buffered here on one
// stream before the service reads it (PeerService reads nothing before the
// stream's metadata named its job and token). A message being read still
// flows past it: the window opens for it.
constexpr int kStreamWindowBytes = 64 << 10;
// Threads beyond one per stream: the Rendezvous calls and gRPC's pollers.
constexpr int kSpareThreads = 64;

}  // namespace

void ConfigurePeerServer(const PeerServiceLimits& limits, grpc::ServerBuilder* builder) {
  // A larger message is refused RESOURCE_EXHAUSTED (gRPC 1.51 does so once
  // it has received it whole; later gRPCs from its length prefix).
  builder->SetMaxReceiveMessageSize(kMaxMemberMessageBytes);
  // Small windows that do not grow with the bandwidth-delay product: an
  // unauthenticated stream cannot make this daemon buffer much.
  builder->AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, kStreamWindowBytes);
  builder->AddChannelArgument(GRPC_ARG_MAX_METADATA_SIZE, 16 << 10);
  builder->AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, limits.max_streams_per_connection);
  // A connection must finish its TLS handshake quickly, and one that sits
  // without streams is closed (a member reconnects when it needs one).
  builder->AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, 10 * 1000);
  builder->AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, 5 * 60 * 1000);
  // Keepalive: this server pings an idle connection every 30 s and drops it
  // when the ping goes unanswered for 10 s; a peer that pings this server
  // more often than every 10 s without data, or at all without calls, is
  // sent GOAWAY after two strikes.
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 30 * 1000);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10 * 1000);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10 * 1000);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 2);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 0);
  // Each stream holds a handler thread for its life (the synchronous API):
  // the cap sits above the stream caps, which refuse first and clearly.
  grpc::ResourceQuota quota("kolo-peer");
  quota.SetMaxThreads(limits.max_streams + kSpareThreads);
  builder->SetResourceQuota(quota);
}

}  // namespace kolo::daemon
