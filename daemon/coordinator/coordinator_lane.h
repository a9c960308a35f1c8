// The coordinator's plans over its daemon's message lane (see member_link.h):
// PlanLane sends a plan to a member node as one lane message, serializing a
// plan shared by every member once; PlanLaneSink is a member's sink that
// tries the lane first.
//
// Thread-safety: PlanLane is thread-safe (one mutex); Use may be called while
// sends are in progress.
#pragma once

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "daemon/coordinator/member_sink.h"
#include "daemon/transport/transport.h"
#include "proto/kolo/v1/peer.pb.h"

namespace kolo::daemon {

class PlanLane {
 public:
  void Use(MessageLane* lane) {
    absl::MutexLock l(&mu_);
    lane_ = lane;
    last_ = nullptr;
    last_bytes_ = nullptr;
  }
  // Sends `message` to `node` over the lane; false if it has none or cannot
  // take it.
  bool Send(int node, const std::shared_ptr<const kolo::v1::CoordinatorMessage>& message) {
    absl::MutexLock l(&mu_);
    if (lane_ == nullptr) return false;
    if (last_ != message) {
      // Every member is handed the same plan object: serialized once.
      auto bytes = std::make_shared<std::string>();
      if (!message->SerializeToString(bytes.get())) return false;
      last_ = message;
      last_bytes_ = std::move(bytes);
    }
    if (last_bytes_->size() > lane_->max_message_bytes()) return false;
    return lane_->SendMessage(node, last_bytes_).ok();
  }

 private:
  absl::Mutex mu_;
  MessageLane* lane_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::shared_ptr<const kolo::v1::CoordinatorMessage> last_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const std::string> last_bytes_ ABSL_GUARDED_BY(mu_);
};

// A member's sink that sends its plans over the lane where it can, and
// everything else (and what the lane refuses) to the member's own sink.
//
// Thread-safety: thread-safe (PlanLane is).
class PlanLaneSink final : public MemberSink {
 public:
  PlanLaneSink(std::shared_ptr<PlanLane> lane, int node, std::shared_ptr<MemberSink> sink)
      : lane_(std::move(lane)), node_(node), sink_(std::move(sink)) {}
  void Send(std::shared_ptr<const kolo::v1::CoordinatorMessage> message) override {
    if (message->has_plan() && lane_->Send(node_, message)) return;
    sink_->Send(std::move(message));
  }

 private:
  const std::shared_ptr<PlanLane> lane_;
  const int node_;
  const std::shared_ptr<MemberSink> sink_;
};

}  // namespace kolo::daemon
