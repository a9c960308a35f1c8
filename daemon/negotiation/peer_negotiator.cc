#include "daemon/negotiation/peer_negotiator.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/start_thread.h"
#include "daemon/coordinator/abort_status.h"
#include "daemon/negotiation/plan_check.h"
#include "daemon/plan/fusion.h"
#include "daemon/plan/tensor_meta.h"
#include "proto/kolo/abi/collective_traits.h"
#include "spdlog/spdlog.h"

namespace kolo::daemon {
namespace {

// How long the responses already planned may go on after the job ended.
constexpr absl::Duration kAbortGrace = absl::Seconds(5);
// After a job ended because ranks finished, how long plans received but not
// yet released by a direct round wait for the round message that releases
// them (it travels over the data plane, the end over the Peer plane).
constexpr absl::Duration kReleaseGrace = absl::Seconds(2);

// Where this node's ranks keep the device tensors of `set`.
kolo::v1::DeviceLayout LayoutOf(const ReadySet& set) {
  kolo::v1::DeviceLayout layout;
  for (const Request& r : set.requests) {
    if (!r.device.has_value()) continue;
    layout.add_ranks(r.rank);
    layout.add_devices(r.device->input.device);
  }
  return layout;
}

// `sets` as the members of one response, unfused (to complete or refuse).
Response MembersOf(std::vector<ReadySet> sets) {
  Response r;
  if (!sets.empty()) r.kind = sets.front().requests.front().kind;
  for (ReadySet& s : sets) r.members.push_back(FusedMember{std::move(s), 0, {}, {}});
  return r;
}

// The sets of `response`'s members, taken out of it.
std::vector<ReadySet> SetsOf(Response& response) {
  std::vector<ReadySet> sets;
  for (FusedMember& m : response.members) sets.push_back(std::move(m.set));
  return sets;
}

}  // namespace

PeerNegotiator::PeerNegotiator(PeerNegotiatorOptions options, StepRunner* runner)
    : options_(std::move(options)), runner_(runner) {}

absl::StatusOr<plan::TunerReport> PeerNegotiator::Autotune(uint32_t since) const {
  std::shared_ptr<Coordinator> coordinator;
  {
    absl::MutexLock l(&lane_mu_);
    coordinator = coordinator_;
  }
  if (coordinator == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", options_.job_id, " plans on the kolod of its rank 0: its tuner runs there"));
  }
  return coordinator->Autotune(since);
}

absl::Status PeerNegotiator::Start(std::vector<int> local_ranks) {
  local_ranks_ = std::move(local_ranks);
  if (options_.transports == nullptr || !options_.make_host_backend) {
    return absl::FailedPreconditionError("this kolod has no transport between nodes");
  }
  const bool local_coordinator = !local_ranks_.empty() && local_ranks_.front() == 0;
  if (options_.peer_credentials == nullptr ||
      (local_coordinator && options_.coordinators == nullptr)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", options_.job_id,
        " spans nodes, but this kolod's Peer plane is off: start kolod with --peer_address "
        "set to this host's cluster address and --peer_tls_ca, --peer_tls_cert and "
        "--peer_tls_key (or --peer_plaintext on a trusted network)"));
  }
  absl::StatusOr<std::unique_ptr<JobTransport>> transport = options_.transports->Create();
  if (!transport.ok()) return transport.status();
  transport_ = std::move(*transport);

  std::unique_ptr<PeerChannel> channel;
  std::string coordinator_name;
  if (local_coordinator) {
    std::shared_ptr<Coordinator> coordinator =
        options_.coordinators->GetOrCreate(options_.job_id, options_.job_token, options_.size,
                                           options_.asked_settings, options_.settings);
    {
      absl::MutexLock l(&lane_mu_);
      coordinator_ = coordinator;
    }
    channel = LocalPeer(std::move(coordinator));
    coordinator_name = absl::StrCat(options_.node_name, " (this node)");
  } else {
    auto c = ConnectPeer(options_.coordinator_address, options_.connect_timeout,
                         options_.peer_credentials->Channel());
    if (!c.ok()) return c.status();
    channel = std::move(*c);
    coordinator_name = options_.coordinator_address;
  }
  MemberLinkOptions link;
  link.hello.set_job_id(options_.job_id);
  link.hello.set_job_token(options_.job_token);
  link.hello.set_node(options_.node_name);
  link.hello.set_size(options_.size);
  for (int r : local_ranks_) link.hello.add_ranks(r);
  link.hello.set_ucx_address(transport_->address());
  *link.hello.mutable_settings() = options_.asked_settings;
  link.hello.set_fusion_threshold_cap(options_.fusion_threshold_cap);
  link.hello.set_direct_ready(transport_->message_lane() != nullptr);
  link.peer_timeout = options_.peer_timeout;
  link.coordinator_name = coordinator_name;
  absl::StatusOr<std::thread> executor = StartThread(
      absl::StrCat("job ", options_.job_id, "'s plan"), "kolo-plan", [this] { ExecuteLoop(); });
  if (!executor.ok()) return executor.status();
  executor_ = std::move(*executor);
  absl::StatusOr<std::thread> aborter =
      StartThread(absl::StrCat("job ", options_.job_id, "'s transport"), "kolo-abort",
                  [this] { AbortTransportLoop(); });
  if (!aborter.ok()) return aborter.status();
  transport_aborter_ = std::move(*aborter);
  auto l = MemberLink::Start(std::move(channel), std::move(link), this);
  if (!l.ok()) return l.status();
  absl::Status ended;
  MemberLink* started;
  {
    absl::MutexLock lane(&lane_mu_);
    {
      absl::MutexLock lock(&mu_);
      link_ = std::move(*l);
      started = link_.get();
      ended = aborted_;
    }
    // The Welcome may have come before the link was ours.
    if (lane_connected_ && coordinator_ == nullptr) UseLaneLocked();
    // The coordinator is here: the job's threads report to it directly.
    if (coordinator_ != nullptr) flush_link_ = started;
  }
  // The job ended while this node was joining: the others learn it now.
  if (!ended.ok()) started->Abort(ended);
  return absl::OkStatus();
}

PeerNegotiator::~PeerNegotiator() {
  bool busy;
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
    busy = executing_ || !(aborted_.ok() || IsPlannedMayFinish(aborted_));
    if (aborted_.ok()) aborted_ = absl::CancelledError("the job ended on this node");
  }
  // A job that ended cleanly with nothing running leaves its transport to
  // close flushed (see AbortTransportLoop); anything else stops it now, so
  // that the executor can be joined.
  if (transport_ && busy) transport_->Abort(absl::CancelledError("the job ended on this node"));
  if (transport_aborter_.joinable()) transport_aborter_.join();
  if (executor_.joinable()) executor_.join();
  {
    // Nothing more goes out over the transport, and what its thread still
    // delivers is dropped.
    absl::MutexLock l(&rounds_mu_);
    rounds_on_.store(false, std::memory_order_release);
    rounds_.reset();
  }
  std::shared_ptr<Coordinator> coordinator;
  {
    // The transport's thread delivers nothing more to the link or the
    // coordinator, and the coordinator (which may outlive this job) stops
    // sending over the transport.
    absl::MutexLock l(&lane_mu_);
    lane_open_ = false;
    lane_link_ = nullptr;
    flush_link_ = nullptr;
    coordinator = std::move(coordinator_);
  }
  if (coordinator != nullptr) coordinator->UseLane(nullptr);
  std::unique_ptr<MemberLink> link;
  {
    absl::MutexLock l(&mu_);
    link = std::move(link_);
  }
  link.reset();  // joins the link's threads, which may call back into us
}

void PeerNegotiator::UseLaneLocked() {
  MemberLink* link;
  {
    absl::MutexLock l(&mu_);
    link = link_.get();
  }
  if (link == nullptr || lane_link_ != nullptr || coordinator_node_ == self_node_) return;
  link->UseLane(sealed_lane_.get(), coordinator_node_);
  lane_link_ = link;
  flush_link_ = link;
}

void PeerNegotiator::Progress() {
  {
    absl::ReaderMutexLock l(&lane_mu_);
    if (flush_link_ != nullptr) flush_link_->Flush();
  }
  if (!rounds_on_.load(std::memory_order_acquire)) return;
  absl::MutexLock r(&rounds_mu_);
  PumpRoundsLocked();
}

void PeerNegotiator::OnLaneMessage(int peer, absl::string_view message) {
  if (DirectRounds::IsRoundMessage(message)) {
    lane_messages_.fetch_add(1, std::memory_order_relaxed);
    OnRoundMessage(peer, message.substr(1));
    return;
  }
  bool to_coordinator = false;
  {
    absl::ReaderMutexLock l(&lane_mu_);
    if (!lane_open_) return;
    if (coordinator_ != nullptr) {
      coordinator_->OnLaneMessage(peer, message);
      to_coordinator = true;
    } else if (peer == coordinator_node_ && lane_link_ != nullptr) {
      lane_link_->OnLaneMessage(message);
    } else {
      return;
    }
    lane_messages_.fetch_add(1, std::memory_order_relaxed);
  }
  if (to_coordinator && rounds_on_.load(std::memory_order_acquire)) {
    // The coordinator may have planned: its node's round says so.
    absl::MutexLock r(&rounds_mu_);
    PumpRoundsLocked();
  }
}

void PeerNegotiator::OnRoundMessage(int peer, absl::string_view message) {
  absl::Status broken;
  {
    absl::MutexLock r(&rounds_mu_);
    if (rounds_ == nullptr) return;
    broken = rounds_->Receive(peer, message);
    if (broken.ok()) PumpRoundsLocked();
  }
  if (!broken.ok()) {
    // It came sealed from a daemon of the job: the nodes' orders would
    // diverge, so the job ends, saying why.
    OnLinkAbort(absl::AbortedError(absl::StrCat("job ", options_.job_id, " on node ",
                                                options_.node_name, ": node ", peer,
                                                " broke the direct rounds: ", broken.message())));
  }
}

void PeerNegotiator::PumpRoundsLocked() {
  if (rounds_ == nullptr) return;
  DirectRounds::Due due = rounds_->Pump();
  absl::MutexLock l(&mu_);
  for (RoundStep& step : due.steps) order_.Add(std::move(step));
  for (const std::string& key : due.spilled) {
    // The executor thread reports it (see ExecuteLoop).
    auto parked = parked_.find(key);
    if (parked != parked_.end()) spilled_.push_back(plan::MetaOf(parked->second, options_.size));
  }
  // The coordinator plans everything from here, in its order.
  if (rounds_->off()) order_.Ungate();
  order_.Drain(&plan_);
}

void PeerNegotiator::ReportSpilled(std::vector<kolo::v1::TensorMeta> metas) {
  MemberLink* link;
  {
    absl::MutexLock l(&mu_);
    link = link_.get();
  }
  if (link == nullptr) return;
  for (const kolo::v1::TensorMeta& meta : metas) link->ReportReady(meta);
  Progress();
}

void PeerNegotiator::LocallyReady(ReadySet set) {
  kolo::v1::TensorMeta meta = plan::MetaOf(set, options_.size);
  std::optional<kolo::v1::DeviceLayout> devices;
  if (meta.device()) devices = LayoutOf(set);
  MemberLink* link;
  {
    absl::MutexLock r(&rounds_mu_);
    absl::MutexLock l(&mu_);
    // The job refuses a name in flight under the same lock it calls us
    // with; should one slip through all the same, it fails on its own and
    // the first stands. Once the job ended, the executor thread fails what
    // is parked.
    const std::string key = PeerKey(set.process_set, set.name);
    if (parked_.contains(key)) {
      absl::Status dup = absl::AlreadyExistsError(
          absl::StrCat(CollectiveKindName(set.requests.front().kind), " \"", set.name,
                       "\": submitted again while still in flight"));
      refused_.push_back({std::move(set), std::move(dup)});
      return;
    }
    if (!aborted_.ok()) {
      parked_.emplace(key, std::move(set));
      return;
    }
    link = link_.get();
    const bool direct = rounds_ != nullptr && link != nullptr && rounds_->Take(set, meta, *link);
    parked_.emplace(key, std::move(set));
    if (direct) return;  // the next Progress sends the round
  }
  if (link != nullptr) link->ReportReady(meta, devices ? &*devices : nullptr);
}

std::vector<WaitingName> PeerNegotiator::WaitingNames() {
  absl::MutexLock r(&rounds_mu_);
  // A name in a round: the nodes whose latest message lacked it.
  absl::flat_hash_map<std::string, std::vector<int>> missing;
  if (rounds_ != nullptr) missing = rounds_->MissingRanks();
  absl::MutexLock l(&mu_);
  std::vector<WaitingName> out;
  for (const auto& [key, set] : parked_) {
    WaitingName w{set.name, set.requests.front().kind, set.first_submitted, {}};
    if (auto it = missing.find(key); it != missing.end()) w.missing_ranks = it->second;
    out.push_back(std::move(w));
  }
  return out;
}

bool PeerNegotiator::Waiting(int process_set, const std::string& name) {
  absl::MutexLock l(&mu_);
  return parked_.contains(PeerKey(process_set, name));
}

void PeerNegotiator::Abort(const absl::Status& why) {
  MemberLink* link;
  {
    absl::MutexLock l(&mu_);
    if (!aborted_.ok()) return;
    aborted_ = why;
    release_deadline_ = absl::Now() + kReleaseGrace;
    link = link_.get();
  }
  if (link != nullptr) link->Abort(why);
}

void PeerNegotiator::AbortTransportLoop() {
  absl::Status why;
  {
    absl::MutexLock l(&mu_);
    auto ended = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stop_ || !aborted_.ok(); };
    mu_.Await(absl::Condition(&ended));
    if (stop_) return;
    // When the job ended because ranks finished and left, the plan received
    // so far may still complete: they had everything they needed, and this
    // node's last responses need only the nodes still running. Once idle the
    // transport stays up: closing it by force would drop this node's last
    // bytes still on their way to the others; it closes, flushed, with the
    // job. Any other end (a node lost, a rank dead, a stall) stops the
    // transfers at once.
    if (IsPlannedMayFinish(aborted_)) {
      auto idle = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return stop_ || (!executing_ && plan_.empty());
      };
      if (mu_.AwaitWithTimeout(absl::Condition(&idle), kAbortGrace)) return;
    }
    why = aborted_;
  }
  transport_->Abort(why);
}

void PeerNegotiator::OnWelcome(const kolo::v1::Welcome& welcome) {
  {
    absl::MutexLock l(&mu_);
    if (welcomed_) {
      spdlog::warn("job {}: a second welcome from the coordinator, ignored", options_.job_id);
      return;
    }
  }
  // Endpoints are made only from what the authenticated coordinator sent,
  // and only once it is consistent with this node.
  if (absl::Status s = CheckWelcome(welcome, options_.size, local_ranks_, transport_->address());
      !s.ok()) {
    OnLinkAbort(absl::AbortedError(absl::StrCat(
        "node ", options_.node_name, ": the coordinator's Welcome is unusable: ", s.message())));
    return;
  }
  std::vector<std::string> addresses;
  std::vector<int> node_of(options_.size, -1);
  for (int n = 0; n < welcome.nodes_size(); ++n) {
    addresses.push_back(welcome.nodes(n).ucx_address());
    for (int r : welcome.nodes(n).ranks()) {
      if (r >= 0 && r < options_.size) node_of[r] = n;
    }
  }
  if (transport_->message_lane() != nullptr && !welcome.lane_key().empty()) {
    // Before Connect: from then on the transport's thread may deliver.
    absl::MutexLock l(&lane_mu_);
    absl::StatusOr<std::unique_ptr<SealedLane>> sealed =
        SealedLane::Create(transport_->message_lane(), welcome.lane_key(), welcome.node_index());
    if (!sealed.ok()) {
      // The negotiation stays on the Peer plane; only its speed suffers.
      spdlog::warn("job {}: negotiating over the Peer plane only: {}", options_.job_id,
                   sealed.status().ToString());
    } else {
      sealed_lane_ = *std::move(sealed);
      sealed_lane_->SetMessageHandler(
          [this](int peer, absl::string_view message) { OnLaneMessage(peer, message); });
      lane_open_ = true;
      coordinator_node_ = node_of[0];
      self_node_ = welcome.node_index();
    }
  }
  if (welcome.direct_ready()) {
    MessageLane* sealed;
    {
      absl::ReaderMutexLock lane(&lane_mu_);
      sealed = sealed_lane_.get();
    }
    if (sealed == nullptr) {
      // The other nodes leave cached names out of their reports: without
      // the lane this node could not take part, and they would wait.
      OnLinkAbort(absl::AbortedError(absl::StrCat(
          "node ", options_.node_name,
          ": the job negotiates cached names over the data plane, which this node cannot "
          "use (see the warning before); start the coordinating kolod with "
          "--direct_ready=false to keep them on the Peer plane")));
      return;
    }
    DirectRoundsOptions direct;
    direct.job_id = options_.job_id;
    direct.node_name = options_.node_name;
    direct.lane = sealed;
    direct.self = welcome.node_index();
    direct.plans_node = node_of[0];
    for (const kolo::v1::NodeEntry& n : welcome.nodes()) {
      direct.node_ranks.emplace_back(n.ranks().begin(), n.ranks().end());
    }
    direct.fusion_threshold = welcome.fusion_threshold();
    absl::MutexLock r(&rounds_mu_);
    rounds_ = std::make_unique<DirectRounds>(std::move(direct));
    rounds_on_.store(true, std::memory_order_release);
    {
      absl::MutexLock l(&mu_);
      order_.Gate();
    }
    spdlog::info(
        "job {}: names every node has cached negotiate in direct rounds between the {} nodes",
        options_.job_id, welcome.nodes_size());
  }
  if (absl::Status s = transport_->Connect(addresses, welcome.node_index()); !s.ok()) {
    OnLinkAbort(absl::AbortedError(
        absl::StrCat("node ", options_.node_name, " could not reach the others: ", s.message())));
    return;
  }
  {
    absl::MutexLock l(&lane_mu_);
    if (sealed_lane_ != nullptr) {
      lane_connected_ = true;
      if (coordinator_ != nullptr) {
        coordinator_->UseLane(sealed_lane_.get());
      } else {
        UseLaneLocked();
      }
    }
  }
  absl::MutexLock l(&mu_);
  host_backend_ = options_.make_host_backend(transport_.get(), node_of);
  node_of_ = std::move(node_of);  // read by the executor thread after welcomed_
  welcomed_ = true;
  spdlog::info("job {}: node {} is node {} of {}", options_.job_id, options_.node_name,
               welcome.node_index(), welcome.nodes_size());
}

void PeerNegotiator::OnPlan(std::vector<PlannedEntry> plan) {
  // Plans come in order (the link numbers them).
  absl::MutexLock r(&rounds_mu_);
  uint64_t received;
  {
    absl::MutexLock l(&mu_);
    received = order_.AddPlan(std::move(plan));
    order_.Drain(&plan_);
  }
  if (rounds_ == nullptr) return;
  // On the coordinator's node the next round releases it everywhere.
  rounds_->PlansSeen(received);
  PumpRoundsLocked();
}

void PeerNegotiator::OnLinkAbort(const absl::Status& why) {
  MemberLink* link;
  {
    absl::MutexLock l(&mu_);
    if (!aborted_.ok()) return;
    aborted_ = why;
    release_deadline_ = absl::Now() + kReleaseGrace;
    link = link_.get();
  }
  spdlog::warn("job {}: {}", options_.job_id, std::string(why.message()));
  // The coordinator relays it to the other nodes (when it was the one that
  // ended the job, it ignores this).
  if (link != nullptr) link->Abort(why);
  runner_->AbortJob(why);
}

void PeerNegotiator::ExecuteLoop() {
  for (;;) {
    PlannedEntry entry;
    {
      absl::MutexLock l(&mu_);
      // Once the job ended because ranks finished, what was planned may
      // still run: plans a direct round has not released yet wait a moment
      // for the round message that places them.
      auto releasing = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return IsPlannedMayFinish(aborted_) && order_.pending() && absl::Now() < release_deadline_;
      };
      auto ready = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return stop_ || (welcomed_ && !plan_.empty()) || !refused_.empty() || !spilled_.empty() ||
               (!aborted_.ok() && !parked_.empty() && !releasing());
      };
      if (releasing()) {
        mu_.AwaitWithDeadline(absl::Condition(&ready), release_deadline_);
      } else {
        mu_.Await(absl::Condition(&ready));
      }
      if (stop_) return;
      if (!spilled_.empty()) {
        std::vector<kolo::v1::TensorMeta> spilled;
        spilled.swap(spilled_);
        mu_.Unlock();
        ReportSpilled(std::move(spilled));
        mu_.Lock();
        continue;
      }
      if (!refused_.empty()) {
        std::vector<std::pair<ReadySet, absl::Status>> refused;
        refused.swap(refused_);
        mu_.Unlock();
        for (auto& [set, why] : refused) {
          std::vector<ReadySet> one;
          one.push_back(std::move(set));
          runner_->Fail(std::move(one), why);
        }
        mu_.Lock();
        continue;
      }
      if (!aborted_.ok() && !welcomed_) {
        plan_.clear();  // never connected to the others: nothing can run
      }
      if (!aborted_.ok() && plan_.empty() && !releasing()) {
        // Fail what is parked: nothing will be planned any more.
        std::vector<ReadySet> left;
        for (auto& [name, set] : parked_) left.push_back(std::move(set));
        parked_.clear();
        absl::Status why = aborted_;
        mu_.Unlock();
        // The job ends before its requests fail (Abort may still be on its
        // way there), so that they fail with the job's own reason.
        runner_->AbortJob(why);
        runner_->Fail(std::move(left), why);
        mu_.Lock();
        continue;
      }
      if (plan_.empty()) continue;  // still waiting for a release
      entry = std::move(plan_.front());
      plan_.pop_front();
      executing_ = true;
      backend_ = host_backend_.get();
    }
    Execute(std::move(entry));
    absl::MutexLock l(&mu_);
    executing_ = false;
  }
}

PlannedStep PeerNegotiator::JoinedStep(const PlannedEntry& entry) {
  PlannedStep step;
  const kolo::v1::TensorMeta& head = entry.metas.front();
  step.response.kind = static_cast<CollectiveKind>(head.kind());
  step.response.dtype = static_cast<DType>(head.dtype());
  step.response.op = static_cast<ReduceOp>(head.op());
  step.response.compression = static_cast<Compression>(head.compression());
  step.response.root_rank = head.root_rank();
  step.response.process_set = entry.process_set;
  step.host_backend = backend_;
  step.context.joined_here = true;
  for (const kolo::v1::TensorMeta& m : entry.metas) {
    step.context.joined_member_bytes.push_back(m.bytes());
  }
  return step;
}

PlannedStep PeerNegotiator::ControlStep(const PlannedEntry& entry, std::vector<ReadySet> sets) {
  PlannedStep step;
  const Request& first = sets.front().requests.front();
  if (first.kind == CollectiveKind::kJoin) {
    step.kind = PlannedStep::Kind::kJoinDone;
    step.last_joined = entry.last_joined;
  } else {
    // Every node registers (or drops) the set at this point of the plan.
    step.kind = PlannedStep::Kind::kProcessSetChange;
    step.new_process_set = entry.new_process_set;
    if (first.kind == CollectiveKind::kAddProcessSet) {
      std::vector<int> ranks(first.aux.begin(), first.aux.end());
      std::sort(ranks.begin(), ranks.end());
      sets_[entry.new_process_set] = std::make_shared<const std::vector<int>>(std::move(ranks));
    } else if (!first.aux.empty()) {
      sets_.erase(static_cast<int>(first.aux[0]));
    }
  }
  step.response = MembersOf(std::move(sets));
  return step;
}

// The life of one planned response on this node:
//   1. Skip it if its process set has no rank here (in step: the sequence
//      number advanced all the same).
//   2. If every rank here joined, take part without tensors.
//   3. Take this node's parked sets of the response's names.
//   4. Settle what cannot run: the job ended, a name missing here (ends the
//      job everywhere), a disagreement among the nodes.
//   5. Run a control step (join done, set change) or the collective.
void PeerNegotiator::Execute(PlannedEntry entry) {
  const uint64_t sequence = sequence_++;
  std::shared_ptr<const std::vector<int>> set_ranks;
  if (!HostsSetOf(entry, &set_ranks)) return;
  const int me = transport_->node();
  if (std::find(entry.joined_nodes.begin(), entry.joined_nodes.end(), me) !=
      entry.joined_nodes.end()) {
    RunJoined(entry, sequence, std::move(set_ranks));
    return;
  }
  absl::Status aborted;
  std::vector<ReadySet> sets = TakeParked(entry, &aborted);
  if (Settled(entry, aborted, sets, sequence)) return;
  if (absl::Status s =
          CheckPlannedEntry(entry, sets, options_.size, set_ranks.get(), transport_->nodes());
      !s.ok()) {
    RefusePlan(std::move(sets), s);
    return;
  }
  if (IsControl(sets.front().requests.front().kind)) {
    PlannedStep step = ControlStep(entry, std::move(sets));
    step.context.sequence = sequence;
    runner_->Run(std::move(step));
    return;
  }
  RunCollective(std::move(entry), std::move(sets), sequence, std::move(set_ranks));
}

bool PeerNegotiator::HostsSetOf(const PlannedEntry& entry,
                                std::shared_ptr<const std::vector<int>>* set_ranks) const {
  if (entry.process_set <= 0) return true;  // every rank (0) or the join's key (-1)
  auto it = sets_.find(entry.process_set);
  if (it == sets_.end()) return true;  // a removed set: its names fail below
  *set_ranks = it->second;
  const int me = transport_->node();
  return std::any_of((*set_ranks)->begin(), (*set_ranks)->end(), [&](int r) {
    return r >= 0 && r < static_cast<int>(node_of_.size()) && node_of_[r] == me;
  });
}

void PeerNegotiator::RunJoined(const PlannedEntry& entry, uint64_t sequence,
                               std::shared_ptr<const std::vector<int>> set_ranks) {
  if (absl::Status s = CheckJoinedEntry(entry, transport_->nodes()); !s.ok()) {
    RefusePlan({}, s);
    return;
  }
  PlannedStep step = JoinedStep(entry);
  step.context.sequence = sequence;
  step.context.set_ranks = std::move(set_ranks);
  runner_->Run(std::move(step));
}

void PeerNegotiator::RefusePlan(std::vector<ReadySet> sets, const absl::Status& why) {
  const absl::Status refused = absl::InvalidArgumentError(
      absl::StrCat("job ", options_.job_id, " on node ", options_.node_name,
                   ": the coordinator's plan is unusable here: ", why.message()));
  spdlog::error("{}", std::string(refused.message()));
  if (!sets.empty()) runner_->Fail(std::move(sets), refused);
  // The other nodes would move bytes this one does not: end the job.
  runner_->AbortJob(refused);
}

std::vector<ReadySet> PeerNegotiator::TakeParked(PlannedEntry& entry, absl::Status* aborted) {
  std::vector<ReadySet> sets;
  absl::MutexLock l(&mu_);
  *aborted = aborted_;
  for (const std::string& name : entry.names) {
    auto it = parked_.find(name);
    if (it == parked_.end()) {
      if (entry.error.ok()) {
        entry.error = absl::InternalError(absl::StrCat(
            "the plan names \"", name, "\", which is not ready on node ", options_.node_name));
      }
      continue;
    }
    sets.push_back(std::move(it->second));
    parked_.erase(it);
  }
  return sets;
}

bool PeerNegotiator::Settled(const PlannedEntry& entry, const absl::Status& aborted,
                             std::vector<ReadySet>& sets, uint64_t sequence) {
  const bool missing = sets.size() != entry.names.size();
  if (!aborted.ok() && (!entry.error.ok() || missing)) {
    runner_->AbortJob(aborted);
    runner_->Fail(std::move(sets), aborted);
    return true;
  }
  // After an abort a planned response still runs while the transport lives
  // (see AbortTransportLoop); once it is aborted, the run fails with why.
  if (entry.error.code() == absl::StatusCode::kInternal && missing) {
    // The other nodes are about to move this response's data and would
    // wait for this one: end the job everywhere now.
    runner_->Fail(std::move(sets), entry.error);
    runner_->AbortJob(absl::InternalError(absl::StrCat(
        "job ", options_.job_id, " on node ", options_.node_name, ": ", entry.error.message())));
    return true;
  }
  if (sets.empty()) return true;
  if (!entry.error.ok()) {
    // A disagreement between the nodes is a failed collective here too.
    PlannedStep step;
    step.error = entry.error;
    step.response = MembersOf(std::move(sets));
    step.context.sequence = sequence;
    runner_->Run(std::move(step));
    return true;
  }
  // A control step (a join done, a process set change) planned before the
  // job ended still completes: every node got it before the end, in the
  // same order, and it moves no data. Failing it would turn the last join
  // of ranks that finished cleanly into an error on the slower nodes.
  return false;
}

void PeerNegotiator::RunCollective(PlannedEntry entry, std::vector<ReadySet> sets,
                                   uint64_t sequence,
                                   std::shared_ptr<const std::vector<int>> set_ranks) {
  // The coordinator fused these; every node lays them out the same way.
  std::vector<Response> fused = PlanFusion(std::move(sets), UINT64_MAX);
  if (fused.size() != 1) {
    for (Response& r : fused) {
      runner_->Fail(SetsOf(r), absl::InternalError("a planned response that does not fuse"));
    }
    runner_->AbortJob(
        absl::InternalError(absl::StrCat("job ", options_.job_id, " on node ", options_.node_name,
                                         ": the coordinator fused tensors this node cannot fuse")));
    return;
  }
  PlannedStep step;
  step.response = std::move(fused.front());
  step.host_backend = backend_;
  step.context.sequence = sequence;
  step.context.set_ranks = std::move(set_ranks);
  step.context.rows = std::move(entry.rows);
  step.context.splits = std::move(entry.splits);
  step.device_comm = std::move(entry.device_comm);
  step.local_ranks = local_ranks_;
  step.device_failure_ends_job = true;
  runner_->Run(std::move(step));
}

}  // namespace kolo::daemon
