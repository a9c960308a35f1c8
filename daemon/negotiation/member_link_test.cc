// MemberLink against a fake channel that records what the member sends: the
// response-cache bits it may use for a tensor the coordinator knows.
#include "daemon/negotiation/member_link.h"

#include <algorithm>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "proto/kolo/abi/types.h"

namespace kolo::daemon {
namespace {

// Records sends; Receive hands out what the test queued as the
// coordinator's messages, and blocks until Close once there is none.
class RecordingChannel final : public PeerChannel {
 public:
  struct Log {
    absl::Mutex mu;
    std::vector<kolo::v1::MemberMessage> sent ABSL_GUARDED_BY(mu);
    std::deque<kolo::v1::CoordinatorMessage> to_member ABSL_GUARDED_BY(mu);
    bool closed ABSL_GUARDED_BY(mu) = false;
  };
  explicit RecordingChannel(std::shared_ptr<Log> log) : log_(std::move(log)) {}
  absl::Status Send(const kolo::v1::MemberMessage& message) override {
    absl::MutexLock l(&log_->mu);
    log_->sent.push_back(message);
    return absl::OkStatus();
  }
  bool Receive(kolo::v1::CoordinatorMessage* message, std::string* why) override {
    absl::MutexLock l(&log_->mu);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(log_->mu) {
      return log_->closed || !log_->to_member.empty();
    };
    log_->mu.Await(absl::Condition(&ready));
    if (log_->closed) {
      *why = "closed";
      return false;
    }
    *message = std::move(log_->to_member.front());
    log_->to_member.pop_front();
    return true;
  }
  void Close() override {
    absl::MutexLock l(&log_->mu);
    log_->closed = true;
  }

 private:
  std::shared_ptr<Log> log_;
};

class NullListener final : public LinkListener {
 public:
  void OnWelcome(const kolo::v1::Welcome&) override {}
  void OnPlan(std::vector<PlannedEntry>) override {}
  void OnLinkAbort(const absl::Status&) override {}
};

// The tensors and cache bits of every Ready the member sent so far.
struct Reported {
  std::vector<std::string> names;
  size_t largest_bits = 0;
};

Reported ReportedSoFar(RecordingChannel::Log& log) {
  Reported out;
  absl::MutexLock l(&log.mu);
  for (const kolo::v1::MemberMessage& m : log.sent) {
    if (!m.has_ready()) continue;
    for (const kolo::v1::TensorMeta& t : m.ready().tensors()) out.names.push_back(t.name());
    out.largest_bits = std::max(out.largest_bits, m.ready().cached_bits().size());
  }
  return out;
}

TEST(MemberLinkTest, ANameTheCoordinatorNeverCachedIsReportedInFullEachTime) {
  // An alltoall's metadata is never given a cache id (its splits change), nor
  // is any name once the cache is full: the same name with the same metadata
  // again must travel in full, not as a bit at an unassigned id.
  auto log = std::make_shared<RecordingChannel::Log>();
  NullListener listener;
  MemberLinkOptions options;
  options.hello.set_job_id("job-ml");
  auto link = MemberLink::Start(std::make_unique<RecordingChannel>(log), options, &listener);
  ASSERT_TRUE(link.ok()) << link.status();
  kolo::v1::TensorMeta meta;
  meta.set_name("a2a");
  meta.set_kind(static_cast<uint32_t>(CollectiveKind::kAlltoall));
  meta.add_splits(0);
  meta.add_splits(4);
  for (int step = 0; step < 3; ++step) {
    (*link)->ReportReady(meta);
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (ReportedSoFar(*log).names.size() < static_cast<size_t>(step + 1) &&
           absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(2));
    }
  }
  Reported got = ReportedSoFar(*log);
  EXPECT_EQ(got.names, (std::vector<std::string>{"a2a", "a2a", "a2a"}));
  EXPECT_EQ(got.largest_bits, 0u);
}

TEST(MemberLinkTest, NamesPlannedWithoutACacheIdAreForgotten) {
  // Names used once (or never cached) must not pile up for the job's life;
  // a name the coordinator gave an id stays, to be reported as a bit.
  auto log = std::make_shared<RecordingChannel::Log>();
  NullListener listener;
  MemberLinkOptions options;
  options.hello.set_job_id("job-ml");
  auto link = MemberLink::Start(std::make_unique<RecordingChannel>(log), options, &listener);
  ASSERT_TRUE(link.ok()) << link.status();
  constexpr int kNames = 50;
  kolo::v1::CoordinatorMessage plan;
  plan.mutable_plan()->set_sequence(0);
  for (int i = 0; i < kNames; ++i) {
    kolo::v1::TensorMeta meta;
    meta.set_name("once/" + std::to_string(i));
    meta.set_kind(static_cast<uint32_t>(CollectiveKind::kAllreduce));
    (*link)->ReportReady(meta);
    plan.mutable_plan()->add_responses()->add_members()->set_name(meta.name());
  }
  kolo::v1::CacheAssignment* kept = plan.mutable_plan()->add_new_cache_ids();
  kept->set_name("once/7");
  kept->set_cache_id(0);
  EXPECT_EQ((*link)->remembered_names(), static_cast<size_t>(kNames));
  {
    absl::MutexLock l(&log->mu);
    log->to_member.push_back(plan);
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while ((*link)->remembered_names() != 1 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  EXPECT_EQ((*link)->remembered_names(), 1u);
}

}  // namespace
}  // namespace kolo::daemon
