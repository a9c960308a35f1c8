#include "daemon/job.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/rank_ranges.h"
#include "daemon/plan/fusion_planner.h"
#include "daemon/multinode/node_group.h"
#include "daemon/session.h"
#include "spdlog/spdlog.h"

namespace kolo::daemon {
namespace {

// Delivers completions grouped per session: one doorbell per session.
void Deliver(std::vector<std::pair<Session*, Completion>>& items) {
  std::map<Session*, std::vector<Completion>> by_session;
  for (auto& [s, c] : items) by_session[s].push_back(std::move(c));
  for (auto& [s, cs] : by_session) s->Complete(cs);
  items.clear();
}

}  // namespace

Job::Job(std::string id, std::string token, int size, Backend* backend,
         uint64_t fusion_threshold_bytes, JobObservers observers, JobLayout layout,
         DeviceBackendFactory* device_backends)
    : id_(std::move(id)),
      token_(std::move(token)),
      size_(size),
      backend_(backend),
      fusion_threshold_(fusion_threshold_bytes),
      observers_(observers),
      created_(absl::Now()),
      layout_(std::move(layout)),
      multi_node_(layout_.local_size > 0 &&
                  (layout_.local_size < size || !layout_.coordinator.empty())),
      device_backends_(device_backends),
      table_(size),
      recorder_(observers.flight_records, observers.flight_errors) {
  ranks_.resize(size);
  for (int r = 0; r < size; ++r) ranks_[r].rank = r;
  std::vector<int> all(size);
  for (int r = 0; r < size; ++r) all[r] = r;
  sets_[0] = std::move(all);
  joined_.assign(size, false);
}

Job::~Job() {
  // The group's threads call back into the job: stop them first.
  group_ptr_.store(nullptr);
  group_.reset();
}

void Job::MaybeStartNodeGroup() {
  if (!multi_node_) return;
  NodeGroupOptions options;
  {
    absl::MutexLock l(&mu_);
    if (group_started_ || static_cast<int>(local_ranks_.size()) < layout_.local_size ||
        !abort_status_.ok()) {
      return;
    }
    group_started_ = true;
    options.local_ranks = local_ranks_;
  }
  options.job_id = id_;
  options.job_token = token_;
  options.size = size_;
  options.node_name = layout_.env.node_name;
  options.local_coordinator = options.local_ranks.front() == 0;
  options.coordinators = layout_.env.coordinators;
  options.coordinator_address = layout_.coordinator;
  options.peer_timeout = layout_.env.peer_timeout;
  options.abort_job = [this](const absl::Status& why) { Abort(why); };
  options.run_device = [this](std::vector<ReadySet> sets, const DeviceCommPlan* comm) {
    RunDeviceSets(std::move(sets), comm);
  };
  options.change_set = [this](std::vector<ReadySet> sets, int new_set) {
    ChangeProcessSet(std::move(sets), new_set);
  };
  options.join_done = [this](std::vector<ReadySet> sets, int last_joined) {
    JoinDone(std::move(sets), last_joined);
  };
  options.on_executed = [this](const std::vector<ReadySet>& sets, const absl::Status& status,
                                absl::Time start, absl::Time end) {
    std::vector<const ReadySet*> executed;
    for (const ReadySet& s : sets) executed.push_back(&s);
    const bool device = !sets.empty() && sets.front().requests.front().device.has_value();
    RecordExecuted(executed, status, start, end, device ? "nccl" : "ucx");
  };
  if (options.local_coordinator && options.coordinators == nullptr) {
    Abort(absl::FailedPreconditionError(absl::StrCat(
        "job ", id_, ": this node hosts rank 0 of a multi-node job but has no peer address "
        "(start kolod with --peer_address)")));
    return;
  }
  auto group = NodeGroup::Start(std::move(options));
  if (!group.ok()) {
    spdlog::warn("job {}: cannot join the other nodes: {}", id_, group.status().ToString());
    Abort(absl::UnavailableError(absl::StrCat("job ", id_, ": this node cannot join the others: ",
                                              group.status().message())));
    return;
  }
  std::vector<ReadySet> sets;
  absl::ReleasableMutexLock l(&mu_);
  group_ = std::move(*group);
  group_ptr_.store(group_.get());
  Outbox unused;
  for (ReadySet& set : table_.TakeReady([this](int ps) ABSL_NO_THREAD_SAFETY_ANALYSIS {
         return RequiredLocked(ps);
       })) {
    OnReadyLocked(std::move(set), &unused);
  }
  sets.swap(to_group_);
  group_send_mu_.Lock();  // in order with Submit's deliveries
  l.Release();
  for (ReadySet& set : sets) group_->LocallyReady(std::move(set));
  group_send_mu_.Unlock();
}

absl::StatusOr<std::vector<int>> Job::ProcessSetMembers(int process_set) const {
  absl::MutexLock l(&mu_);
  auto it = sets_.find(process_set);
  if (it == sets_.end()) {
    return absl::NotFoundError(absl::StrCat("job ", id_, " has no process set ", process_set));
  }
  return it->second;
}

absl::Status Job::AttachRank(int rank, const std::string& session_id,
                             int64_t pid) {
  absl::MutexLock l(&mu_);
  if (!abort_status_.ok()) {
    return absl::AbortedError(absl::StrCat(
        "job ", id_, " was aborted (", abort_status_.message(),
        "); start it again once its ranks have left"));
  }
  RankSnapshot& r = ranks_[rank];
  if (r.attached) {
    return absl::AlreadyExistsError(absl::StrCat(
        "rank ", rank, " of job ", id_, " is already attached (pid ", r.pid,
        ")"));
  }
  if (multi_node_ && !r.attached && static_cast<int>(local_ranks_.size()) >= layout_.local_size &&
      !group_started_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", id_, ": already ", layout_.local_size, " local ranks attached on this node"));
  }
  r.attached = true;
  r.session_id = session_id;
  r.pid = pid;
  ++attached_;
  if (multi_node_) {
    local_ranks_.insert(std::lower_bound(local_ranks_.begin(), local_ranks_.end(), rank), rank);
  }
  return absl::OkStatus();
}

int Job::RankLeft(int rank, bool clean, const absl::Status& why) {
  int remaining;
  std::string session_id;
  {
    absl::MutexLock l(&mu_);
    RankSnapshot& r = ranks_[rank];
    session_id = r.session_id;
    if (r.attached) {
      r.attached = false;
      --attached_;
    }
    remaining = attached_;
  }
  if (remaining > 0) {
    absl::Status status =
        clean ? absl::AbortedError(absl::StrCat(
                    "job ", id_, ": rank ", rank,
                    " has shut down; collectives that need it cannot run"))
              : absl::AbortedError(absl::StrCat("job ", id_, ": rank ", rank,
                                                " died: ", why.message()));
    Abort(status);
  }
  // After its pending requests failed: the session's IPC mappings go (those
  // a running collective holds close when it finishes).
  {
    absl::MutexLock l(&device_mu_);
    if (device_backend_ != nullptr) device_backend_->ReleaseSession(session_id);
  }
  return remaining;
}

absl::StatusOr<Backend*> Job::BackendFor(const Response& response) {
  if (!response.on_device) return backend_;
  if (DeviceBackend* made = device_backend_ptr_.load()) return made;
  std::vector<int> all(size_);
  for (int r = 0; r < size_; ++r) all[r] = r;
  if (device_backends_ == nullptr) return DeviceBackendFor(nullptr, std::move(all));
  // One node: the job's first device response places each rank on the GPU
  // of its tensor, and every GPU used becomes an NCCL rank of a
  // communicator this daemon alone drives.
  RankDevices placed;
  for (const Request& r : response.members.front().set.requests) {
    if (r.device.has_value()) placed.emplace_back(r.rank, r.device->input.device);
  }
  absl::StatusOr<std::string> id = device_backends_->NewCommId();
  absl::StatusOr<DeviceCommPlan> comm =
      id.ok() ? MakeDeviceCommPlan(size_, {placed}, *std::move(id))
              : absl::StatusOr<DeviceCommPlan>(id.status());
  if (!comm.ok()) {
    absl::MutexLock l(&device_mu_);
    if (device_error_.ok()) {
      device_error_ = absl::Status(comm.status().code(),
                                   absl::StrCat("job ", id_, ": no NCCL communicator: ",
                                                comm.status().message()));
    }
    return device_error_;
  }
  return DeviceBackendFor(&*comm, std::move(all));
}

absl::StatusOr<Backend*> Job::DeviceBackendFor(const DeviceCommPlan* comm,
                                               std::vector<int> local_ranks) {
  absl::MutexLock l(&device_mu_);
  if (device_backend_ != nullptr) return device_backend_.get();
  if (!device_error_.ok()) return device_error_;
  if (device_backends_ == nullptr) {
    device_error_ = absl::UnimplementedError(
        absl::StrCat("job ", id_, ": this kolod has no backend for device tensors"));
    return device_error_;
  }
  if (comm == nullptr) {
    device_error_ = absl::InternalError(absl::StrCat(
        "job ", id_, ": a device response came before the job's NCCL communicator"));
    return device_error_;
  }
  auto made = device_backends_->Create(
      DeviceBackendOptions{id_, *comm, std::move(local_ranks), &device_cancel_});
  if (!made.ok()) {
    spdlog::warn("job {}: no device backend: {}", id_, made.status().ToString());
    device_error_ = made.status();
    return device_error_;
  }
  device_backend_ = *std::move(made);
  device_backend_ptr_.store(device_backend_.get());
  return device_backend_.get();
}

void Job::JoinDone(std::vector<ReadySet> sets, int last_joined) {
  Outbox out;
  {
    absl::MutexLock l(&mu_);
    for (const ReadySet& set : sets) {
      for (const Request& r : set.requests) {
        out.push_back({r.session.get(), Completion{r.request_id, absl::OkStatus(), 0, 0,
                                                   last_joined}});
      }
    }
    joined_.assign(size_, false);
    last_joined_ = -1;
  }
  Deliver(out);
}

void Job::ChangeProcessSet(std::vector<ReadySet> sets, int new_set) {
  Outbox out;
  {
    absl::MutexLock l(&mu_);
    for (ReadySet& set : sets) {
      const Request& first = set.requests.front();
      int id = new_set;
      if (first.kind == CollectiveKind::kAddProcessSet) {
        std::vector<int> ranks(first.aux.begin(), first.aux.end());
        std::sort(ranks.begin(), ranks.end());
        sets_[id] = std::move(ranks);
      } else {
        id = first.aux.empty() ? 0 : static_cast<int>(first.aux[0]);
        sets_.erase(id);
        absl::Status gone =
            absl::FailedPreconditionError(absl::StrCat("process set ", id, " was removed"));
        for (Request& r : table_.TakeProcessSet(id)) {
          out.push_back({r.session.get(), Completion{r.request_id, gone}});
        }
      }
      for (const Request& r : set.requests) {
        out.push_back({r.session.get(), Completion{r.request_id, absl::OkStatus(), 0, 0, id}});
      }
    }
  }
  Deliver(out);
}

void Job::RunDeviceSets(std::vector<ReadySet> sets, const DeviceCommPlan* comm) {
  std::vector<int> local;
  {
    absl::MutexLock l(&mu_);
    local = local_ranks_;
  }
  absl::StatusOr<Backend*> backend = DeviceBackendFor(comm, std::move(local));
  // The coordinator fused these; every node plans the same single response.
  std::vector<Response> responses = PlanFusion(std::move(sets), UINT64_MAX);
  absl::Status status;
  for (Response& response : responses) {
    absl::Status s = ExecuteResponse(response, backend);
    if (status.ok()) status = s;
  }
  if (!status.ok()) {
    // The job's communicator is unusable (or was never made here) and the
    // other daemons would wait in NCCL for this one until their deadline:
    // end the job on every node now.
    Abort(absl::Status(status.code(), absl::StrCat("job ", id_, ": device collective failed on "
                                                   "node ", layout_.env.node_name, ": ",
                                                   status.message())));
  }
}

void Job::Fail(std::vector<Request> requests, const absl::Status& status) {
  std::vector<std::pair<Session*, Completion>> out;
  for (Request& r : requests) {
    out.push_back({r.session.get(), Completion{r.request_id, status}});
  }
  Deliver(out);
}

void Job::Abort(const absl::Status& status) {
  std::vector<Request> pending;
  {
    absl::MutexLock l(&mu_);
    if (!abort_status_.ok()) return;
    abort_status_ = status;
    recorder_.Error(status.ToString());
    pending = table_.TakeAll();
    for (ReadySet& set : ready_) {
      for (Request& r : set.requests) pending.push_back(std::move(r));
    }
    ready_.clear();
    for (auto& [key, sets] : groups_) {
      for (ReadySet& set : sets) {
        for (Request& r : set.requests) pending.push_back(std::move(r));
      }
    }
    groups_.clear();
    for (Request& r : join_requests_) pending.push_back(std::move(r));
    join_requests_.clear();
    for (ReadySet& set : to_group_) {
      for (Request& r : set.requests) pending.push_back(std::move(r));
    }
    to_group_.clear();
  }
  Fail(std::move(pending), status);
  if (NodeGroup* g = group_ptr_.load()) g->Abort(status);
  device_cancel_.store(true);
  if (DeviceBackend* d = device_backend_ptr_.load()) d->Abort(status);
}

absl::Status Job::AdmitLocked(const Request& r) const {
  if (!abort_status_.ok()) return abort_status_;
  const char* kind = CollectiveKindName(r.kind);

  if (r.device.has_value() && r.process_set != 0) {
    // The job has one NCCL communicator, over every rank's GPU.
    return absl::UnimplementedError(absl::StrCat(
        kind, " \"", r.name, "\": device tensors run on the whole job so far, not on process "
        "set ", r.process_set, " (copy the tensor to host memory for a process set)"));
  }
  if (multi_node_ && r.kind == CollectiveKind::kJoin && sets_.size() > 1) {
    return absl::UnimplementedError(absl::StrCat(
        kind, ": job ", id_, " spans nodes, where join is not available while process sets "
        "exist (remove them first)"));
  }
  if ((r.kind == CollectiveKind::kJoin || r.kind == CollectiveKind::kAddProcessSet ||
       r.kind == CollectiveKind::kRemoveProcessSet) &&
      r.process_set != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        kind, " \"", r.name, "\": involves every rank of the job, not process set ",
        r.process_set));
  }
  auto set = sets_.find(r.process_set);
  if (set == sets_.end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        kind, " \"", r.name, "\": rank ", r.rank, " used process set ",
        r.process_set, ", which does not exist"));
  }
  if (!std::binary_search(set->second.begin(), set->second.end(), r.rank)) {
    return absl::FailedPreconditionError(absl::StrCat(
        kind, " \"", r.name, "\": rank ", r.rank, " is not in process set ",
        r.process_set, " (ranks ", FormatRankRanges(set->second), ")"));
  }
  if (joined_[r.rank]) {
    return absl::FailedPreconditionError(absl::StrCat(
        kind, " \"", r.name, "\": rank ", r.rank,
        " has joined and submits nothing until every rank has joined"));
  }
  return absl::OkStatus();
}

std::vector<int> Job::RequiredLocked(int process_set) const {
  if (multi_node_) {
    // Local readiness: every local rank (of the set), once all have
    // attached and the node has joined the others.
    if (group_ == nullptr) return {-1};
    std::vector<int> out;
    auto it = sets_.find(process_set);
    if (it == sets_.end()) return out;
    for (int r : local_ranks_) {
      if (!joined_[r] && std::binary_search(it->second.begin(), it->second.end(), r)) {
        out.push_back(r);
      }
    }
    return out;
  }
  std::vector<int> out;
  auto it = sets_.find(process_set);
  if (it == sets_.end()) return out;
  for (int r : it->second) {
    if (!joined_[r]) out.push_back(r);
  }
  return out;
}

absl::Status Job::CheckRunnableLocked(const ReadySet& set) const {
  const Request& first = set.requests.front();
  const char* kind = CollectiveKindName(first.kind);
  const std::vector<int>& members = sets_.at(set.process_set);
  if (set.joined > 0 && first.kind != CollectiveKind::kAllreduce &&
      first.kind != CollectiveKind::kBroadcast && first.kind != CollectiveKind::kBarrier) {
    std::vector<int> joined;
    for (int r : members) {
      if (joined_[r]) joined.push_back(r);
    }
    return absl::FailedPreconditionError(absl::StrCat(
        kind, " \"", set.name, "\": cannot run while ranks ", FormatRankRanges(joined),
        " have joined (only allreduce, broadcast and barrier can)"));
  }
  switch (first.kind) {
    case CollectiveKind::kBroadcast:
      if (!std::binary_search(members.begin(), members.end(), first.root_rank)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "broadcast \"", set.name, "\": root rank ", first.root_rank,
            " is not in process set ", set.process_set));
      }
      if (joined_[first.root_rank]) {
        return absl::FailedPreconditionError(absl::StrCat(
            "broadcast \"", set.name, "\": root rank ", first.root_rank, " has joined"));
      }
      break;
    case CollectiveKind::kAlltoall: {
      const int64_t n = static_cast<int64_t>(members.size());
      for (const Request& r : set.requests) {
        const int64_t rows = r.shape[0];
        if (r.aux.empty()) {
          if (rows % n != 0) {
            return absl::FailedPreconditionError(absl::StrCat(
                "alltoall \"", set.name, "\": rank ", r.rank, "'s first dimension ",
                rows, " does not divide evenly among ", n, " ranks; pass splits"));
          }
          continue;
        }
        if (static_cast<int64_t>(r.aux.size()) != n) {
          return absl::FailedPreconditionError(absl::StrCat(
              "alltoall \"", set.name, "\": rank ", r.rank, " sent ", r.aux.size(),
              " splits for ", n, " ranks"));
        }
        int64_t sum = 0;
        for (int64_t v : r.aux) {
          if (v < 0) {
            return absl::FailedPreconditionError(absl::StrCat(
                "alltoall \"", set.name, "\": rank ", r.rank, " sent split ", v));
          }
          sum += v;
          if (sum > rows) {
            return absl::FailedPreconditionError(absl::StrCat(
                "alltoall \"", set.name, "\": rank ", r.rank, "'s splits sum to ", sum,
                " or more, its first dimension is ", rows));
          }
        }
        if (sum != rows) {
          return absl::FailedPreconditionError(absl::StrCat(
              "alltoall \"", set.name, "\": rank ", r.rank, "'s splits sum to ", sum,
              ", its first dimension is ", rows));
        }
      }
      break;
    }
    case CollectiveKind::kAddProcessSet: {
      const std::vector<int64_t>& ranks = first.aux;
      if (ranks.empty()) {
        return absl::FailedPreconditionError("add_process_set: no ranks given");
      }
      for (size_t i = 0; i < ranks.size(); ++i) {
        if (ranks[i] < 0 || ranks[i] >= size_ || (i > 0 && ranks[i] <= ranks[i - 1])) {
          return absl::FailedPreconditionError(absl::StrCat(
              "add_process_set: ranks must be distinct, ascending and in [0, ", size_,
              "); got ", ranks[i], " at position ", i));
        }
      }
      break;
    }
    case CollectiveKind::kRemoveProcessSet: {
      if (first.aux.size() != 1 || first.aux[0] <= 0 ||
          !sets_.contains(static_cast<int>(first.aux[0]))) {
        return absl::FailedPreconditionError(absl::StrCat(
            "remove_process_set: no process set ",
            first.aux.empty() ? -1 : first.aux[0], " to remove"));
      }
      break;
    }
    default:
      break;
  }
  return absl::OkStatus();
}

void Job::OnReadyLocked(ReadySet set, Outbox* out) {
  if (multi_node_) {
    // Checked here on this node's ranks (alltoall splits, broadcast roots);
    // a failure reaches the others through the coordinator.
    auto members = sets_.find(set.process_set);
    set.set_size = members == sets_.end() ? size_ : static_cast<int>(members->second.size());
    set.joined = 0;  // this node's joined ranks of the set (the coordinator adds the rest)
    if (members != sets_.end()) {
      for (int r : members->second) set.joined += joined_[r] ? 1 : 0;
    }
    if (set.agreement.ok()) set.agreement = CheckRunnableLocked(set);
    // A group goes to the other nodes once it is complete here, its members
    // in one report, so the coordinator sees them ready together and fuses
    // them (across nodes each member is still negotiated on its own name).
    ReleaseWhenGroupCompleteLocked(std::move(set), &to_group_);
    return;
  }
  const std::vector<int>& members = sets_.at(set.process_set);
  set.set_size = static_cast<int>(members.size());
  set.joined = 0;
  for (int r : members) set.joined += joined_[r] ? 1 : 0;
  if (set.agreement.ok()) set.agreement = CheckRunnableLocked(set);
  const Request& first = set.requests.front();
  if (set.agreement.ok() && first.kind == CollectiveKind::kAddProcessSet) {
    int id = next_set_id_++;
    sets_[id] = std::vector<int>(first.aux.begin(), first.aux.end());
    for (const Request& r : set.requests) {
      out->push_back({r.session.get(), Completion{r.request_id, absl::OkStatus(), 0, 0, id}});
    }
    return;
  }
  if (set.agreement.ok() && first.kind == CollectiveKind::kRemoveProcessSet) {
    int id = static_cast<int>(first.aux[0]);
    sets_.erase(id);
    absl::Status gone = absl::FailedPreconditionError(
        absl::StrCat("process set ", id, " was removed"));
    for (Request& r : table_.TakeProcessSet(id)) {
      out->push_back({r.session.get(), Completion{r.request_id, gone}});
    }
    for (const Request& r : set.requests) {
      out->push_back({r.session.get(), Completion{r.request_id, absl::OkStatus(), 0, 0, id}});
    }
    return;
  }
  // A group runs once every member is ready everywhere, in ready order.
  ReleaseWhenGroupCompleteLocked(std::move(set), &ready_);
}

void Job::ReleaseWhenGroupCompleteLocked(ReadySet set, std::vector<ReadySet>* to) {
  const Request& first = set.requests.front();
  // A member that failed (its ranks disagreed) still counts toward its
  // group: it is released with the others and fails alone, instead of
  // holding them back forever.
  if (first.group_size <= 1) {
    to->push_back(std::move(set));
    return;
  }
  auto key = std::make_pair(set.process_set, first.group_id);
  std::vector<ReadySet>& group = groups_[key];
  const size_t group_size = first.group_size;
  group.push_back(std::move(set));
  if (group.size() < group_size) return;
  for (ReadySet& member : group) to->push_back(std::move(member));
  groups_.erase(key);
}

void Job::JoinLocked(Request request, Outbox* out) {
  const int rank = request.rank;
  joined_[rank] = true;
  last_joined_ = rank;
  join_requests_.push_back(std::move(request));
  if (multi_node_) {
    // Names that waited only for this rank go to the others first (the join
    // must not overtake them).
    for (ReadySet& set : table_.TakeReady([this](int ps) ABSL_NO_THREAD_SAFETY_ANALYSIS {
           return RequiredLocked(ps);
         })) {
      OnReadyLocked(std::move(set), out);
    }
    if (join_requests_.size() < local_ranks_.size()) return;
    // Every rank of this node has joined: the coordinator stops waiting for
    // this node, which takes part with zeros until every node has joined.
    // Its own key (set -1) keeps it apart from any tensor name.
    ReadySet set;
    set.name = "kolo.join";
    set.process_set = -1;
    set.first_submitted = join_requests_.front().submitted_at;
    set.ready_at = absl::Now();
    set.set_size = size_;
    for (Request& r : join_requests_) {
      r.aux = {last_joined_};
      set.requests.push_back(std::move(r));
    }
    join_requests_.clear();
    to_group_.push_back(std::move(set));
    return;
  }
  if (static_cast<int>(join_requests_.size()) == size_) {
    // Everyone has joined: the join completes with the last rank to join.
    for (const Request& r : join_requests_) {
      out->push_back({r.session.get(),
                      Completion{r.request_id, absl::OkStatus(), 0, 0, last_joined_}});
    }
    join_requests_.clear();
    joined_.assign(size_, false);
    return;
  }
  // Names that waited only for this rank are ready now.
  for (ReadySet& set : table_.TakeReady([this](int ps) ABSL_NO_THREAD_SAFETY_ANALYSIS {
         return RequiredLocked(ps);
       })) {
    OnReadyLocked(std::move(set), out);
  }
}

void Job::Submit(Request request) {
  Outbox out;
  std::vector<ReadySet> to_group;
  bool run = false;
  absl::ReleasableMutexLock l(&mu_);
  {
    ranks_[request.rank].submitted++;
    ranks_[request.rank].last_submit = request.submitted_at;
    absl::Status refused = AdmitLocked(request);
    if (refused.ok() && request.kind == CollectiveKind::kJoin) {
      JoinLocked(std::move(request), &out);
    } else if (refused.ok()) {
      if (multi_node_) {
        // Once every local rank submitted a name it leaves the table for the
        // node group; a rank submitting it again before it completes is
        // still a duplicate in flight.
        NodeGroup* g = group_ptr_.load();
        bool in_flight = g != nullptr && g->IsParked(request.process_set, request.name);
        auto same = [&](const ReadySet& set) {
          return set.name == request.name && set.process_set == request.process_set;
        };
        for (const ReadySet& set : to_group_) in_flight |= same(set);
        for (const auto& [key, members] : groups_) {
          for (const ReadySet& set : members) in_flight |= same(set);
        }
        if (in_flight) {
          refused = absl::AlreadyExistsError(absl::StrCat(
              CollectiveKindName(request.kind), " \"", request.name, "\": rank ",
              request.rank, " submitted this name again while it is still in flight"));
        }
      }
    }
    if (refused.ok() && request.kind != CollectiveKind::kJoin) {
      auto added = table_.Add(request, RequiredLocked(request.process_set));
      if (!added.ok()) {
        refused = added.status();
      } else if (added->has_value()) {
        OnReadyLocked(std::move(**added), &out);
      }
    }
    if (!refused.ok()) {
      // A refusal because the job was aborted repeats the abort, which is
      // recorded once already (and may carry any code, e.g. DEADLINE_EXCEEDED
      // from the stall timeout); recording it per submission would flush the
      // errors that explain the abort out of the flight recorder.
      if (abort_status_.ok()) recorder_.Error(refused.ToString());
      out.push_back({request.session.get(), Completion{request.request_id, refused}});
    }
    if (!ready_.empty() && !executing_) {
      executing_ = true;
      run = true;
    }
    to_group.swap(to_group_);
  }
  if (!multi_node_) {
    l.Release();
    Deliver(out);
    if (run) RunReady();
    return;
  }
  // Names reach the node group in the order they became ready here: the
  // next submission's delivery waits for this one (taken before mu_ is let
  // go).
  group_send_mu_.Lock();
  l.Release();
  Deliver(out);
  if (NodeGroup* g = group_ptr_.load()) {
    for (ReadySet& set : to_group) g->LocallyReady(std::move(set));
  }
  group_send_mu_.Unlock();
}

void Job::RunReady() {
  Timeline* timeline = observers_.timeline;
  Metrics* metrics = observers_.metrics;
  for (;;) {
    std::vector<ReadySet> batch;
    {
      absl::MutexLock l(&mu_);
      if (ready_.empty()) {
        executing_ = false;
        return;
      }
      batch.swap(ready_);
    }
    std::vector<std::pair<Session*, Completion>> out;
    std::vector<ReadySet> agreed;
    for (ReadySet& set : batch) {
      if (timeline != nullptr && timeline->recording()) {
        for (const Request& r : set.requests) {
          timeline->Span(id_, r.rank, set.name, "QUEUED", r.submitted_at, set.ready_at);
          timeline->Instant(id_, r.rank, set.name, "NEGOTIATED", set.ready_at);
        }
      }
      if (set.agreement.ok()) {
        agreed.push_back(std::move(set));
        continue;
      }
      for (Request& r : set.requests) {
        out.push_back({r.session.get(), Completion{r.request_id, set.agreement}});
      }
      if (metrics != nullptr) metrics->RecordError(set.requests.front().kind);
      absl::MutexLock l(&mu_);
      recorder_.Error(set.agreement.ToString());
      const Request& r = set.requests.front();
      recorder_.Record(CollectiveRecord{0, r.kind, set.name, r.dtype, r.op, r.bytes,
                                        true, std::string(set.agreement.message()),
                                        set.first_submitted, set.ready_at,
                                        absl::ZeroDuration(), 0});
    }
    Deliver(out);
    std::vector<Response> responses =
        PlanFusion(std::move(agreed), fusion_threshold_);
    for (Response& response : responses) (void)ExecuteResponse(response, BackendFor(response));
  }
}

absl::Status Job::ExecuteResponse(Response& response, absl::StatusOr<Backend*> backend) {
  std::vector<std::pair<Session*, Completion>> out;
  const absl::Time start = absl::Now();
  const std::string backend_name =
      backend.ok() ? std::string((*backend)->name()) : std::string("none");
  {
    absl::MutexLock l(&mu_);
    executing_name_ = response.members.front().set.name;
    executing_kind_ = response.kind;
    executing_backend_ = backend_name;
    executing_since_ = start;
  }
  absl::Status status = backend.ok() ? (*backend)->Execute(response) : backend.status();
  const absl::Time end = absl::Now();
  uint64_t bytes = 0;
  for (const FusedMember& m : response.members) {
    bytes += m.set.requests.front().bytes;
    absl::Status member_status = status.ok() ? m.status : status;
    if (!member_status.ok()) {
      // Nobody will hand these back: free them here.
      for (size_t i = 0; i < m.results.size(); ++i) {
        m.set.requests[i].session->ReleaseResult(m.results[i].offset);
      }
    }
    for (size_t i = 0; i < m.set.requests.size(); ++i) {
      const Request& r = m.set.requests[i];
      Completion c{r.request_id, member_status};
      if (member_status.ok() && i < m.results.size()) {
        c.result_offset = m.results[i].offset;
        c.result_bytes = m.results[i].bytes;
        c.value = m.results[i].value;
      }
      out.push_back({r.session.get(), std::move(c)});
    }
  }
  Deliver(out);
  std::vector<const ReadySet*> sets;
  for (const FusedMember& m : response.members) sets.push_back(&m.set);
  RecordExecuted(sets, status, start, end, backend_name);
  return status;
}

void Job::RecordExecuted(const std::vector<const ReadySet*>& sets, const absl::Status& status,
                         absl::Time start, absl::Time end, const std::string& backend_name) {
  if (sets.empty()) return;
  Timeline* timeline = observers_.timeline;
  Metrics* metrics = observers_.metrics;
  const Request& head = sets.front()->requests.front();
  const absl::Time done = absl::Now();
  const int fused = static_cast<int>(sets.size());
  uint64_t bytes = 0;
  for (const ReadySet* s : sets) bytes += s->requests.front().bytes;
  if (metrics != nullptr) {
    metrics->RecordResponse(head.kind, head.dtype, fused, bytes);
    for (const ReadySet* s : sets) {
      metrics->RecordLatency(head.kind, done - s->first_submitted);
      if (!status.ok()) metrics->RecordError(head.kind);
    }
  }
  if (timeline != nullptr && timeline->recording()) {
    std::string fuse_args = absl::StrCat("\"tensors\":", fused);
    std::string reduce_args = absl::StrCat(
        "\"bytes\":", bytes, ",\"backend\":", JsonString(backend_name));
    for (const ReadySet* s : sets) {
      for (const Request& r : s->requests) {
        if (multi_node_) {
          // Queued until every rank here had it; negotiated among the nodes
          // until the plan ran it.
          timeline->Span(id_, r.rank, s->name, "QUEUED", r.submitted_at, s->ready_at);
          timeline->Span(id_, r.rank, s->name, "NEGOTIATED", s->ready_at, start);
        }
        timeline->Instant(id_, r.rank, s->name, "FUSED", start, fuse_args);
        timeline->Span(id_, r.rank, s->name, "REDUCED", start, end, reduce_args);
        timeline->Instant(id_, r.rank, s->name, "DONE", done);
      }
    }
  }
  absl::MutexLock l(&mu_);
  executing_since_ = absl::InfiniteFuture();
  ++responses_;
  fused_tensors_ += sets.size();
  bytes_reduced_ += bytes;
  for (const ReadySet* s : sets) {
    for (const Request& r : s->requests) {
      ranks_[r.rank].completed++;
      ranks_[r.rank].last_complete = done;
    }
    const Request& r = s->requests.front();
    recorder_.Record(CollectiveRecord{
        0, r.kind, s->name, r.dtype, r.op, r.bytes, !status.ok(),
        std::string(status.message()), s->first_submitted,
        s->ready_at, end - start, fused - 1});
  }
  if (!status.ok()) recorder_.Error(status.ToString());
}

std::vector<StallView> Job::Stalls(absl::Time now, absl::Duration warning) const {
  absl::MutexLock l(&mu_);
  std::vector<StallView> out;
  // A stall of `name` first submitted at `since`; nullopt if not yet one.
  auto stall = [&](const std::string& name, CollectiveKind kind,
                   absl::Time since) -> std::optional<StallView> {
    if (now - since < warning) return std::nullopt;
    StallView s;
    s.name = name;
    s.kind = kind;
    s.waiting = now - since;
    s.since = since;
    return s;
  };
  for (PendingView& p : table_.Pending([this](int ps) ABSL_NO_THREAD_SAFETY_ANALYSIS {
         return RequiredLocked(ps);
       })) {
    std::optional<StallView> found = stall(p.name, p.kind, p.first_submitted);
    if (!found) continue;
    StallView& s = *found;
    const absl::Duration waiting = s.waiting;
    s.message = absl::StrFormat(
        "%s \"%s\" waiting %d s for ranks %s (submitted: %s)",
        CollectiveKindName(p.kind), p.name, absl::ToInt64Seconds(waiting),
        FormatRankRanges(p.missing), FormatRankRanges(p.submitted));
    s.submitted = std::move(p.submitted);
    s.missing = std::move(p.missing);
    out.push_back(std::move(s));
  }
  if (NodeGroup* g = group_ptr_.load()) {
    // Ready here, waiting for the other nodes' ranks.
    for (const NodeGroup::Parked& p : g->ParkedNames()) {
      std::optional<StallView> found = stall(p.name, p.kind, p.first_submitted);
      if (!found) continue;
      StallView& s = *found;
      const absl::Duration waiting = s.waiting;
      s.submitted = local_ranks_;
      for (int r = 0; r < size_; ++r) {
        if (!std::binary_search(local_ranks_.begin(), local_ranks_.end(), r)) {
          s.missing.push_back(r);
        }
      }
      s.message = absl::StrFormat(
          "%s \"%s\" waiting %d s for the other nodes (ranks %s have not all submitted; "
          "every rank here did: %s)",
          CollectiveKindName(p.kind), p.name, absl::ToInt64Seconds(waiting),
          FormatRankRanges(s.missing), FormatRankRanges(s.submitted));
      out.push_back(std::move(s));
    }
  }
  if (executing_since_ != absl::InfiniteFuture() &&
      now - executing_since_ >= warning) {
    StallView s;
    s.name = executing_name_;
    s.kind = executing_kind_;
    s.executing = true;
    s.waiting = now - executing_since_;
    s.since = executing_since_;
    for (int r = 0; r < size_; ++r) s.submitted.push_back(r);
    s.message = absl::StrFormat(
        "%s \"%s\" executing for %d s (every rank submitted; stuck in the %s backend)",
        CollectiveKindName(s.kind), s.name, absl::ToInt64Seconds(s.waiting),
        executing_backend_);
    out.push_back(std::move(s));
  }
  return out;
}

JobSnapshot Job::Snapshot(bool with_history) const {
  absl::MutexLock l(&mu_);
  JobSnapshot s;
  s.job_id = id_;
  s.size = size_;
  s.aborted = !abort_status_.ok();
  s.error = std::string(abort_status_.message());
  s.ranks = ranks_;
  s.pending = table_.Pending([this](int ps) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return RequiredLocked(ps);
  });
  s.responses = responses_;
  s.fused_tensors = fused_tensors_;
  s.bytes_reduced = bytes_reduced_;
  s.created = created_;
  if (with_history) {
    s.recent.assign(recorder_.records().begin(), recorder_.records().end());
    s.errors.assign(recorder_.errors().begin(), recorder_.errors().end());
  }
  return s;
}

}  // namespace kolo::daemon
