// GrpcRendezvous: how an elastic job's daemon calls Peer.Rendezvous of the
// daemon leading its membership (elastic_group.h), over the Peer plane with
// its credentials. Channels are kept per address; each call has a deadline.
//
// Thread-safety: thread-safe.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/job/elastic_group.h"
#include "grpcpp/grpcpp.h"

namespace kolo::daemon {

class GrpcRendezvous final : public RendezvousCaller {
 public:
  // `deadline` bounds one call (the leader answers within its poll time).
  GrpcRendezvous(std::shared_ptr<grpc::ChannelCredentials> credentials, absl::Duration deadline);

  absl::StatusOr<kolo::v1::ElasticFormed> Call(const std::string& address,
                                               const kolo::v1::ElasticReport& report) override;
  // Whether the daemon at `address` refuses connections now (its process is
  // gone), found within about half a second; false when it answers or the
  // check cannot tell in that time.
  bool Refuses(const std::string& address);

 private:
  std::shared_ptr<grpc::Channel> ChannelTo(const std::string& address);

  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  const absl::Duration deadline_;
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kolo::daemon
