#include "daemon/coordinator/coordinator.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/rank_ranges.h"
#include "common/secret_compare.h"
#include "daemon/coordinator/abort_status.h"
#include "daemon/transport/sealed_lane.h"
#include "spdlog/spdlog.h"

namespace kolo::daemon {

Coordinator::Coordinator(std::string job_id, std::string token, int size,
                         CoordinatorOptions options)
    : job_id_(std::move(job_id)),
      token_(std::move(token)),
      asked_settings_(options.asked_settings),
      fusion_threshold_(options.fusion_threshold_bytes),
      autotune_(options.autotune),
      direct_ready_(options.direct_ready),
      lane_(std::make_shared<PlanLane>()),
      members_(job_id_, token_, size),
      sets_(size),
      cache_(options.cache_capacity),
      readiness_(size, members_, sets_, cache_),
      planner_(job_id_, size, options, members_, sets_, cache_, readiness_) {}

void Coordinator::UseLane(MessageLane* lane) { lane_->Use(lane); }

void Coordinator::OnLaneMessage(int node_index, absl::string_view message) {
  int member;
  std::string node;
  {
    absl::MutexLock l(&mu_);
    if (!members_.welcomed() || !members_.HasNode(node_index)) return;
    member = members_.MemberOf(node_index);
    node = members_.DescribeNode(node_index);
  }
  kolo::v1::MemberMessage msg;
  if (!msg.ParseFromArray(message.data(), static_cast<int>(message.size())) || !msg.has_ready()) {
    // It came sealed from that daemon (sealed_lane.h): dropping it would
    // leave its names waiting for ever, so the job ends, saying why.
    OnAbort(member, absl::InternalError(absl::StrCat(
                        node, " sent a negotiation message of ", message.size(),
                        " bytes over the data plane that is not a readable Ready report")));
    return;
  }
  {
    absl::MutexLock l(&mu_);
    Membership::Member* m = members_.Find(member);
    if (m->lane_sink == nullptr) {
      m->lane_sink = std::make_shared<PlanLaneSink>(lane_, node_index, m->sink);
    }
  }
  OnReady(member, msg.ready());
}

bool Coordinator::HasToken(const std::string& token) const { return SecretsEqual(token, token_); }

void Coordinator::Deliver(absl::ReleasableMutexLock& state, MemberOutbox* out) {
  // Taken before the state lock is let go: the next state change waits for
  // this delivery, so every sink sees messages in the order of the changes
  // (two plans sent in opposite orders to two nodes would make them execute
  // different responses under the same sequence number).
  absl::MutexLock order(&deliver_mu_);
  state.Release();
  for (auto& [sink, msg] : *out) sink->Send(std::move(msg));
  out->clear();
}

absl::StatusOr<int> Coordinator::AddMember(const kolo::v1::Hello& hello,
                                           std::shared_ptr<MemberSink> sink) {
  MemberOutbox out;
  absl::ReleasableMutexLock l(&mu_);
  if (aborted_) {
    return absl::AbortedError(absl::StrCat("job ", job_id_, " was aborted"));
  }
  if (absl::Status same =
          plan::SameAsked(asked_settings_, "the coordinator's node", hello.settings(),
                          absl::StrCat("node ", hello.node().substr(0, 128)));
      !same.ok()) {
    // The node holds ranks the job needs (it knows the token), so the job
    // cannot form: it ends everywhere, saying why.
    const absl::Status why(same.code(), absl::StrCat("job ", job_id_, ": ", same.message()));
    AbortLocked(why, &out);
    Deliver(l, &out);
    return why;
  }
  absl::StatusOr<int> member = members_.Admit(hello, std::move(sink));
  if (!member.ok()) return member.status();
  all_direct_ = all_direct_ && hello.direct_ready();
  if (hello.fusion_threshold_cap() > 0) {
    fusion_cap_ = std::min<uint64_t>(fusion_cap_, hello.fusion_threshold_cap());
  }
  if (members_.complete()) WelcomeLocked(&out);
  Deliver(l, &out);
  return member;
}

absl::StatusOr<plan::TunerReport> Coordinator::Autotune(uint32_t since) const {
  absl::MutexLock l(&mu_);
  if (tuner_ == nullptr) {
    return absl::FailedPreconditionError(
        autotune_.enabled
            ? absl::StrCat("job ", job_id_, ": the tuner starts once every node has joined")
            : "the job does not autotune (every rank sets HOROVOD_AUTOTUNE=1 or KOLO_AUTOTUNE=1)");
  }
  return tuner_->Report(since);
}

void Coordinator::WelcomeLocked(MemberOutbox* out) {
  // The job fuses no more than any of its nodes' kolods allows.
  const uint64_t bound = fusion_cap_ == UINT64_MAX ? fusion_threshold_ : fusion_cap_;
  const uint64_t threshold = std::min(fusion_threshold_, bound);
  if (autotune_.enabled) tuner_ = std::make_unique<plan::FusionTuner>(autotune_, threshold, bound);
  planner_.UseFusion(threshold, tuner_.get());
  kolo::v1::Welcome welcome;
  // Without a key (no randomness to be had) the nodes negotiate over the
  // Peer plane only.
  if (absl::StatusOr<std::string> key = NewLaneKey(); key.ok()) {
    welcome.set_lane_key(*std::move(key));
  } else {
    spdlog::warn(
        "job {}: no key for the data plane's messages, so the job negotiates over the "
        "Peer plane only: {}",
        job_id_, key.status().ToString());
  }
  welcome.set_fusion_threshold(threshold);
  members_.Welcome(&welcome);
  // Direct rounds: not for a job that autotunes (the tuner learns from the
  // plans made here), nor past kMaxDirectNodes (every node sends every
  // other one its message of a round; the coordinator's one plan per member
  // then costs less).
  welcome.set_direct_ready(direct_ready_ && all_direct_ && !autotune_.enabled &&
                           !welcome.lane_key().empty() && members_.nodes() <= kMaxDirectNodes);
  for (int n = 0; n < members_.nodes(); ++n) {
    auto msg = std::make_shared<kolo::v1::CoordinatorMessage>();
    *msg->mutable_welcome() = welcome;
    msg->mutable_welcome()->set_node_index(n);
    out->push_back({members_.OfNode(n).sink, std::move(msg)});
  }
  for (auto& [id, readies] : early_) {
    Membership::Member* m = members_.Find(id);
    for (const auto& ready : readies) {
      if (ready.has_devices() && !m->has_devices) {
        m->has_devices = true;
        m->devices = ready.devices();
      }
      for (const auto& meta : ready.tensors()) readiness_.Add(m->node_index, meta);
    }
  }
  early_.clear();
  PlanLocked(out);
}

void Coordinator::OnReady(int member, const kolo::v1::Ready& ready) {
  MemberOutbox out;
  absl::ReleasableMutexLock l(&mu_);
  Membership::Member* m = members_.Find(member);
  if (m == nullptr || aborted_) return;
  m->last_heard = absl::Now();
  if (!members_.welcomed()) {
    kolo::v1::Ready copy = ready;
    // Cached bits need the node index; none exist before the welcome.
    copy.clear_cached_bits();
    early_[member].push_back(std::move(copy));
    return;
  }
  if (ready.has_devices() && !m->has_devices) {
    m->has_devices = true;
    m->devices = ready.devices();
  }
  readiness_.AddReport(m->node_index, ready);
  PlanLocked(&out);
  Deliver(l, &out);
}

void Coordinator::PlanLocked(MemberOutbox* out) {
  if (!readiness_.has_ready()) return;
  kolo::v1::Plan plan = planner_.Plan(readiness_.TakeReady());
  plan.set_sequence(plans_++);
  auto msg = std::make_shared<kolo::v1::CoordinatorMessage>();
  *msg->mutable_plan() = std::move(plan);
  for (const auto& [id, m] : members_.all()) {
    if (m.connected) out->push_back({m.lane_sink != nullptr ? m.lane_sink : m.sink, msg});
  }
}

void Coordinator::AbortLocked(const absl::Status& why, MemberOutbox* out) {
  if (aborted_) return;
  aborted_ = true;
  aborted_flag_.store(true);
  auto msg = std::make_shared<kolo::v1::CoordinatorMessage>();
  ToPeerAbort(why, msg->mutable_abort());
  msg->mutable_abort()->set_plans_sent(plans_);
  for (const auto& [id, m] : members_.all()) {
    if (m.connected) out->push_back({m.sink, msg});
  }
}

void Coordinator::MemberLost(int member, const std::string& why) {
  MemberOutbox out;
  absl::ReleasableMutexLock l(&mu_);
  Membership::Member* m = members_.Find(member);
  if (m == nullptr) return;
  m->connected = false;
  AbortLocked(absl::AbortedError(absl::StrCat("job ", job_id_, ": ", Membership::Describe(*m),
                                              " left the job: ", why)),
              &out);
  Deliver(l, &out);
}

void Coordinator::OnAbort(int member, const absl::Status& why) {
  MemberOutbox out;
  absl::ReleasableMutexLock l(&mu_);
  AbortLocked(why, &out);
  Deliver(l, &out);
}

void Coordinator::Heartbeat(int member) {
  absl::MutexLock l(&mu_);
  if (Membership::Member* m = members_.Find(member)) m->last_heard = absl::Now();
}

bool Coordinator::Tick(absl::Time now, absl::Duration timeout) {
  MemberOutbox out;
  absl::ReleasableMutexLock l(&mu_);
  for (const auto& [id, m] : members_.all()) {
    if (aborted_) break;
    if (m.connected && now - m.last_heard > timeout) {
      AbortLocked(absl::AbortedError(absl::StrCat(
                      "job ", job_id_, ": ranks ", FormatRankRanges(m.ranks), " (node ", m.node,
                      ") sent nothing for ", absl::ToInt64Seconds(timeout),
                      " s: its daemon is stopped, hung or cut off")),
                  &out);
    }
  }
  if (!aborted_) {
    auto msg = std::make_shared<kolo::v1::CoordinatorMessage>();
    msg->mutable_heartbeat();
    for (const auto& [id, m] : members_.all()) {
      if (m.connected) out.push_back({m.sink, msg});
    }
  }
  const bool alive = !aborted_;
  Deliver(l, &out);
  return alive;
}

bool Coordinator::aborted() const { return aborted_flag_.load(); }

int Coordinator::members() const {
  absl::MutexLock l(&mu_);
  int n = 0;
  for (const auto& [id, m] : members_.all()) n += m.connected ? 1 : 0;
  return n;
}

}  // namespace kolo::daemon
