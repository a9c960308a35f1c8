// MemberLink against a fake channel that records what the member sends: the
// response-cache bits it may use for a tensor the coordinator knows, and the
// message lane (reports sent by Flush, plans from both ways run in order, an
// abort that overtook lane plans).
#include "daemon/wire/member_link.h"

#include <algorithm>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/testing/wait_until.h"
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
  bool immediate() const override { return immediate_; }
  bool immediate_ = false;

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
    WaitUntil([&] { return ReportedSoFar(*log).names.size() >= static_cast<size_t>(step + 1); },
              absl::Seconds(20));
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
  WaitUntil([&] { return (*link)->remembered_names() == 1; }, absl::Seconds(20));
  EXPECT_EQ((*link)->remembered_names(), 1u);
}

// A message lane that records what the link sends over it.
class RecordingLane final : public MessageLane {
 public:
  void SetMessageHandler(Handler) override {}
  absl::Status SendMessage(int peer, std::shared_ptr<const std::string> message) override {
    absl::MutexLock l(&mu_);
    if (refuse_) return absl::InvalidArgumentError("refused");
    sent_.emplace_back(peer, *message);
    return absl::OkStatus();
  }
  size_t max_message_bytes() const override { return 1 << 16; }
  std::vector<std::pair<int, std::string>> sent() {
    absl::MutexLock l(&mu_);
    return sent_;
  }
  void Refuse() {
    absl::MutexLock l(&mu_);
    refuse_ = true;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::pair<int, std::string>> sent_ ABSL_GUARDED_BY(mu_);
  bool refuse_ ABSL_GUARDED_BY(mu_) = false;
};

// Records the plans (by the name of their first member) and the abort.
class PlanListener final : public LinkListener {
 public:
  void OnWelcome(const kolo::v1::Welcome&) override {}
  void OnPlan(std::vector<PlannedEntry> plan) override {
    absl::MutexLock l(&mu);
    for (const PlannedEntry& e : plan) names.push_back(e.names.empty() ? "" : e.names.front());
  }
  void OnLinkAbort(const absl::Status& why) override {
    absl::MutexLock l(&mu);
    aborts.push_back(why);
  }
  absl::Mutex mu;
  std::vector<std::string> names ABSL_GUARDED_BY(mu);
  std::vector<absl::Status> aborts ABSL_GUARDED_BY(mu);
};

kolo::v1::CoordinatorMessage PlanNaming(uint64_t sequence, const std::string& name) {
  kolo::v1::CoordinatorMessage m;
  m.mutable_plan()->set_sequence(sequence);
  m.mutable_plan()->add_responses()->add_members()->set_name(name);
  return m;
}

std::string Bytes(const kolo::v1::CoordinatorMessage& m) { return m.SerializeAsString(); }

// A link using a recording lane to coordinator node 0, with its stream and
// its listener.
class MemberLinkLaneTest : public ::testing::Test {
 protected:
  void Start(absl::Duration heartbeat = absl::Seconds(1), int coordinator_node = 0) {
    MemberLinkOptions options;
    options.heartbeat = heartbeat;
    auto link = MemberLink::Start(std::make_unique<RecordingChannel>(log_), options, &listener_);
    ASSERT_TRUE(link.ok()) << link.status();
    link_ = *std::move(link);
    link_->UseLane(&lane_, coordinator_node);
  }
  void FromStream(kolo::v1::CoordinatorMessage m) {
    absl::MutexLock l(&log_->mu);
    log_->to_member.push_back(std::move(m));
  }
  bool Eventually(size_t plans, size_t aborts) {
    return WaitUntil(
        [&] {
          absl::MutexLock l(&listener_.mu);
          return listener_.names.size() == plans && listener_.aborts.size() == aborts;
        },
        absl::Seconds(20));
  }
  static kolo::v1::CoordinatorMessage Abort(const std::string& why, uint64_t plans_sent) {
    kolo::v1::CoordinatorMessage m;
    m.mutable_abort()->set_reason(why);
    m.mutable_abort()->set_plans_sent(plans_sent);
    return m;
  }

  std::shared_ptr<RecordingChannel::Log> log_ = std::make_shared<RecordingChannel::Log>();
  PlanListener listener_;
  RecordingLane lane_;
  std::unique_ptr<MemberLink> link_;
};

TEST_F(MemberLinkLaneTest, FlushSendsTheBatchsReportsOverTheLaneInOneMessage) {
  Start(absl::Seconds(1), /*coordinator_node=*/3);
  for (const char* name : {"a", "b"}) {
    kolo::v1::TensorMeta meta;
    meta.set_name(name);
    link_->ReportReady(meta);
  }
  link_->Flush();
  auto sent = lane_.sent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].first, 3);
  kolo::v1::MemberMessage m;
  ASSERT_TRUE(m.ParseFromString(sent[0].second));
  ASSERT_TRUE(m.has_ready());
  ASSERT_EQ(m.ready().tensors_size(), 2);
  EXPECT_EQ(m.ready().tensors(1).name(), "b");
  EXPECT_TRUE(ReportedSoFar(*log_).names.empty()) << "the stream carried a report too";

  // A lane that cannot take it: the writer sends it over the stream.
  lane_.Refuse();
  kolo::v1::TensorMeta meta;
  meta.set_name("c");
  link_->ReportReady(meta);
  link_->Flush();
  EXPECT_TRUE(WaitUntil([&] { return ReportedSoFar(*log_).names.size() == 1; }, absl::Seconds(20)));
  EXPECT_EQ(ReportedSoFar(*log_).names, std::vector<std::string>{"c"});
}

TEST(MemberLinkTest, ToACoordinatorInThisProcessFlushSendsOnTheCallersThread) {
  auto log = std::make_shared<RecordingChannel::Log>();
  auto channel = std::make_unique<RecordingChannel>(log);
  channel->immediate_ = true;
  NullListener listener;
  MemberLinkOptions options;
  options.heartbeat = absl::Seconds(30);  // the writer stays asleep
  auto link = MemberLink::Start(std::move(channel), options, &listener);
  ASSERT_TRUE(link.ok()) << link.status();
  kolo::v1::TensorMeta meta;
  meta.set_name("a");
  (*link)->ReportReady(meta);
  (*link)->Flush();
  // Sent by the time Flush returned: no hand-off to the writer.
  EXPECT_EQ(ReportedSoFar(*log).names, std::vector<std::string>{"a"});
}

TEST_F(MemberLinkLaneTest, PlansRunInSequenceWhicheverWayEachCame) {
  Start();
  // Plans 1 and 2 come over the lane before plan 0 comes over the stream.
  link_->OnLaneMessage(Bytes(PlanNaming(2, "p2")));
  link_->OnLaneMessage(Bytes(PlanNaming(1, "p1")));
  EXPECT_TRUE(Eventually(0, 0));
  FromStream(PlanNaming(0, "p0"));
  ASSERT_TRUE(Eventually(3, 0));
  absl::MutexLock l(&listener_.mu);
  EXPECT_EQ(listener_.names, (std::vector<std::string>{"0:p0", "0:p1", "0:p2"}));
}

TEST_F(MemberLinkLaneTest, AnAbortThatOvertookLanePlansWaitsForThem) {
  Start();
  kolo::v1::CoordinatorMessage abort = Abort("ranks finished", 1);
  abort.mutable_abort()->set_planned_may_finish(true);
  FromStream(abort);
  // The reader has taken the abort off the stream...
  ASSERT_TRUE(WaitUntil(
      [&] {
        absl::MutexLock l(&log_->mu);
        return log_->to_member.empty();
      },
      absl::Seconds(20)));
  // ...and holds it: neither it nor a plan reaches the listener before plan 0.
  EXPECT_TRUE(StaysFalse(
      [&] {
        absl::MutexLock l(&listener_.mu);
        return !listener_.names.empty() || !listener_.aborts.empty();
      },
      absl::Milliseconds(50)))
      << "the abort ran ahead of plan 0";
  link_->OnLaneMessage(Bytes(PlanNaming(0, "last")));
  ASSERT_TRUE(Eventually(1, 1));
  absl::MutexLock l(&listener_.mu);
  EXPECT_EQ(listener_.names, std::vector<std::string>{"0:last"});
  EXPECT_NE(listener_.aborts[0].message().find("ranks finished"), std::string::npos);
}

TEST_F(MemberLinkLaneTest, AnAbortWaitsForMissingLanePlansOnlyAMoment) {
  Start(/*heartbeat=*/absl::Milliseconds(100));
  FromStream(Abort("a node was lost", 5));
  ASSERT_TRUE(Eventually(0, 1));
  // A plan that comes after the abort took effect is not run.
  link_->OnLaneMessage(Bytes(PlanNaming(0, "late")));
  EXPECT_TRUE(Eventually(0, 1));
}

TEST_F(MemberLinkLaneTest, AnUnreadableLaneMessageEndsTheLinkSayingSo) {
  Start();
  link_->OnLaneMessage("\xff\xff\xff not a message");
  absl::MutexLock l(&listener_.mu);
  ASSERT_EQ(listener_.aborts.size(), 1u);
  EXPECT_NE(listener_.aborts[0].message().find("unreadable"), std::string::npos);
}

TEST_F(MemberLinkLaneTest, APlanFarAheadOfTheDueOneIsHeldOnlyBoundedly) {
  Start();
  for (uint64_t seq = 1; seq <= 1025; ++seq) link_->OnLaneMessage(Bytes(PlanNaming(seq, "x")));
  absl::MutexLock l(&listener_.mu);
  ASSERT_EQ(listener_.aborts.size(), 1u);
  EXPECT_NE(listener_.aborts[0].message().find("while plan 0 was due"), std::string::npos);
  EXPECT_TRUE(listener_.names.empty());
}

}  // namespace
}  // namespace kolo::daemon

namespace kolo::daemon {
namespace {

kolo::v1::TensorMeta Meta(const std::string& name, CollectiveKind kind) {
  kolo::v1::TensorMeta m;
  m.set_name(name);
  m.set_kind(static_cast<uint32_t>(kind));
  m.set_dtype(static_cast<uint32_t>(DType::kFloat32));
  m.add_shape(1);
  m.set_bytes(4);
  return m;
}

TEST(SplitReadyTest, ABatchOfTenThousandNamesGoesInMessagesUnderTheBound) {
  kolo::v1::Ready ready;
  ready.set_cached_bits(std::string(128, '\xff'));
  ready.mutable_devices()->add_ranks(0);
  ready.mutable_devices()->add_devices(1);
  *ready.add_tensors() = Meta("kolo.join", CollectiveKind::kJoin);
  const std::string pad(190, 'p');  // names are at most 200 bytes
  constexpr int kNames = 10000;
  for (int i = 0; i < kNames; ++i) {
    *ready.add_tensors() = Meta(absl::StrCat(pad, i), CollectiveKind::kAllreduce);
  }
  ASSERT_GT(ready.ByteSizeLong(), size_t{kMaxMemberMessageBytes});
  std::vector<kolo::v1::MemberMessage> out = SplitReady(ready);
  ASSERT_GT(out.size(), 1u);
  int names = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_LE(out[i].ByteSizeLong(), size_t{kMaxMemberMessageBytes}) << i;
    ASSERT_TRUE(out[i].has_ready());
    EXPECT_EQ(out[i].ready().has_devices(), i == 0);
    EXPECT_EQ(out[i].ready().cached_bits().empty(), i != 0);
    const auto& tensors = out[i].ready().tensors();
    for (int k = 0; k < tensors.size(); ++k) {
      // The join goes last, after every other name of the batch.
      const bool last = i + 1 == out.size() && k + 1 == tensors.size();
      EXPECT_EQ(tensors[k].kind() == static_cast<uint32_t>(CollectiveKind::kJoin), last);
      if (!last) {
        EXPECT_EQ(tensors[k].name(), absl::StrCat(pad, names++));
      }
    }
  }
  EXPECT_EQ(names, kNames);
}

TEST(SplitReadyTest, EveryPartWithADeviceTensorCarriesTheLayout) {
  kolo::v1::Ready ready;
  for (int r = 0; r < 8; ++r) {
    ready.mutable_devices()->add_ranks(r);
    ready.mutable_devices()->add_devices(r);
  }
  const std::string pad(190, 'p');
  for (int i = 0; i < 10000; ++i) {
    kolo::v1::TensorMeta m = Meta(absl::StrCat(pad, i), CollectiveKind::kAllreduce);
    m.set_device(i % 97 == 5);
    *ready.add_tensors() = m;
  }
  std::vector<kolo::v1::MemberMessage> out = SplitReady(ready);
  ASSERT_GT(out.size(), 2u);
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_LE(out[i].ByteSizeLong(), size_t{kMaxMemberMessageBytes}) << i;
    const auto& tensors = out[i].ready().tensors();
    const bool device = std::any_of(tensors.begin(), tensors.end(),
                                    [](const kolo::v1::TensorMeta& t) { return t.device(); });
    if (device) {
      EXPECT_TRUE(out[i].ready().has_devices()) << "part " << i;
      EXPECT_EQ(out[i].ready().devices().ranks_size(), 8) << "part " << i;
    }
  }
}

TEST(SplitReadyTest, ASmallBatchStaysOneMessageAndATooLargeTensorGoesAlone) {
  kolo::v1::Ready small;
  *small.add_tensors() = Meta("a", CollectiveKind::kAllreduce);
  EXPECT_EQ(SplitReady(small).size(), 1u);
  kolo::v1::Ready ready;
  *ready.add_tensors() = Meta("before", CollectiveKind::kAllreduce);
  kolo::v1::TensorMeta huge = Meta("huge", CollectiveKind::kAlltoall);
  for (int i = 0; i < 1000; ++i) huge.add_splits(i);
  *ready.add_tensors() = huge;
  *ready.add_tensors() = Meta("after", CollectiveKind::kAllreduce);
  std::vector<kolo::v1::MemberMessage> out = SplitReady(ready, /*max_bytes=*/512);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].ready().tensors(0).name(), "before");
  EXPECT_EQ(out[1].ready().tensors(0).name(), "huge");
  EXPECT_EQ(out[2].ready().tensors(0).name(), "after");
}

}  // namespace
}  // namespace kolo::daemon
