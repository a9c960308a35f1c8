// What both ends of the Peer plane agree on besides peer.proto: the largest
// message each way, the metadata that names a stream's job, and the mark of
// a refusal to retry. The Peer server takes no larger message from anyone,
// so a member splits its Ready reports into messages under the bound
// (SplitReady in member_link.h); a member takes plans up to the other bound
// from its coordinator.
#pragma once

#include <cstddef>

namespace kolo::daemon {

// Member -> coordinator (Hello, Ready, Heartbeat, PeerAbort, and an elastic
// ElasticReport): what the Peer server receives. Every Hello and heartbeat
// is far smaller; a Ready report is split under it; the largest single
// tensor metadata (an alltoall's splits: local ranks x job size values) of
// any job whose plans fit kMaxPeerMessageBytes fits it too.
inline constexpr int kMaxMemberMessageBytes = 1 << 20;

// Coordinator -> member (a plan: an alltoall's split matrix has size^2
// entries): what a member accepts.
inline constexpr int kMaxPeerMessageBytes = 256 << 20;

// The job a Negotiate stream is for, in its initial metadata (binary
// values): the Peer service checks them before it reads any message, so a
// peer without the job's token never has a message of its buffered. The
// Hello that follows names the same job and token.
inline constexpr char kJobIdKey[] = "kolo-job-id-bin";
inline constexpr char kJobTokenKey[] = "kolo-job-token-bin";
// The longest job id and token the metadata may carry.
inline constexpr size_t kMaxJobIdBytes = 256;
inline constexpr size_t kMaxJobTokenBytes = 256;

// Trailing metadata on a refusal that a member answers by saying Hello
// again after a backoff (see ConnectPeer): the job has not started on the
// coordinator's daemon yet (NOT_FOUND), or the peer's share of streams is
// taken for now (RESOURCE_EXHAUSTED).
inline constexpr char kRetryHelloKey[] = "kolo-retry-hello";

}  // namespace kolo::daemon
