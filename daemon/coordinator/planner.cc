#include "daemon/coordinator/planner.h"

#include <cstdint>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/backend/device_comm_plan.h"
#include "daemon/plan/fusion.h"
#include "daemon/plan/runnable.h"
#include "daemon/plan/tensor_desc.h"
#include "proto/kolo/abi/collective_traits.h"
#include "proto/kolo/abi/types.h"

namespace kolo::daemon {
namespace {

CollectiveKind KindOf(const kolo::v1::TensorMeta& m) {
  return static_cast<CollectiveKind>(m.kind());
}

bool IsSetChange(const kolo::v1::TensorMeta& m) { return kolo::IsSetChange(KindOf(m)); }

bool IsJoin(const kolo::v1::TensorMeta& m) { return KindOf(m) == CollectiveKind::kJoin; }

}  // namespace

kolo::v1::Plan Planner::Plan(const std::vector<ReadyName>& ready) {
  kolo::v1::Plan plan;
  // Step 1: group the fusable names once; group_of[i] is the group whose
  // first name is ready[i].
  std::vector<size_t> fusable;  // indices into ready
  std::vector<plan::FusionCandidate> candidates;
  for (size_t i = 0; i < ready.size(); ++i) {
    const ReadyName& r = ready[i];
    if (!r.error.ok() || IsSetChange(r.meta) || IsJoin(r.meta)) continue;
    fusable.push_back(i);
    candidates.push_back({plan::DescOf(r.meta), r.joined_nodes});
  }
  std::vector<std::vector<size_t>> group_of(ready.size());
  const uint64_t threshold = tuner_ != nullptr ? tuner_->threshold() : fusion_threshold_;
  const absl::Time now = tuner_ != nullptr ? absl::Now() : absl::InfinitePast();
  for (const plan::FusionGroup& g : plan::GroupForFusion(candidates, threshold)) {
    std::vector<size_t>& names = group_of[fusable[g.members.front()]];
    for (size_t m : g.members) {
      names.push_back(fusable[m]);
      if (tuner_ != nullptr)
        tuner_->Planned(ready[fusable[m]].meta.name(), candidates[m].desc.bytes, now);
    }
  }
  // Step 2: responses in the order of their first name. A fusable name not
  // first in its group was planned with its group.
  std::vector<kolo::v1::PlannedResponse*> device_responses;
  for (size_t i = 0; i < ready.size(); ++i) {
    const ReadyName& r = ready[i];
    if (!r.error.ok()) {
      AddErrorResponse(r.meta, r.error, &plan);
    } else if (IsSetChange(r.meta)) {
      AddSetChange(r.meta, &plan);
    } else if (IsJoin(r.meta)) {
      AddJoinResponse(r.meta, &plan);
    } else if (!group_of[i].empty()) {
      kolo::v1::PlannedResponse* response = AddFusedResponse(ready, group_of[i], &plan);
      if (r.meta.device()) device_responses.push_back(response);
    }
  }
  // Step 3.
  AttachDeviceComm(device_responses);
  return plan;
}

void Planner::AddErrorResponse(const kolo::v1::TensorMeta& meta, const absl::Status& error,
                               kolo::v1::Plan* plan) {
  auto* r = plan->add_responses();
  r->add_members()->set_name(meta.name());
  r->set_process_set(meta.process_set());
  r->set_error_code(static_cast<int>(error.code()));
  r->set_error_message(std::string(error.message()));
  // A failed name never enters the cache: its metadata was not agreed.
}

void Planner::AddSetChange(const kolo::v1::TensorMeta& meta, kolo::v1::Plan* plan) {
  absl::StatusOr<int> new_set = ChangeSet(meta, plan);
  if (!new_set.ok()) {
    AddErrorResponse(meta, new_set.status(), plan);
    return;
  }
  // In plan order on every node: each registers (or drops) the set then.
  auto* r = plan->add_responses();
  AddMember(meta, r, plan);
  r->set_new_process_set(*new_set);
}

void Planner::AddJoinResponse(const kolo::v1::TensorMeta& meta, kolo::v1::Plan* plan) {
  auto* r = plan->add_responses();
  r->add_members()->set_name(meta.name());
  r->set_process_set(-1);  // the join's own key on the nodes
  r->set_last_joined(static_cast<int32_t>(meta.aux_size() > 0 ? meta.aux(0) : -1));
}

kolo::v1::PlannedResponse* Planner::AddFusedResponse(const std::vector<ReadyName>& ready,
                                                     const std::vector<size_t>& names,
                                                     kolo::v1::Plan* plan) {
  auto* response = plan->add_responses();
  // The group's names share their process set and joined nodes.
  const ReadyName& first = ready[names.front()];
  response->set_process_set(first.meta.process_set());
  for (int n : first.joined_nodes) response->add_joined_nodes(n);
  for (size_t i : names) {
    const kolo::v1::TensorMeta& meta = ready[i].meta;
    // Nodes whose ranks all joined never saw this tensor: they lay the
    // response out from its metadata.
    if (!first.joined_nodes.empty()) *response->add_metas() = meta;
    AddMember(meta, response, plan);
    // Allgather and alltoall are never fused: their one member's rows.
    if (ReportsRows(KindOf(meta))) *response->mutable_rows() = meta.rows();
    if (Traits(KindOf(meta)).splits) *response->mutable_splits() = meta.splits();
  }
  return response;
}

void Planner::AddMember(const kolo::v1::TensorMeta& meta, kolo::v1::PlannedResponse* response,
                        kolo::v1::Plan* plan) {
  auto* m = response->add_members();
  const std::string key = PeerKey(meta.process_set(), meta.name());
  if (std::optional<uint32_t> id = cache_.Find(key)) {
    m->set_cache_id(*id);
    return;
  }
  m->set_name(meta.name());
  // An allgather's rows and an alltoall's splits change from step to step:
  // never a cache bit.
  if (HasPerRankRows(KindOf(meta)) || IsSetChange(meta)) return;
  std::optional<uint32_t> id =
      cache_.Assign(key, meta, members_.nodes(), members_.NodesOfSet(sets_, meta.process_set()));
  if (!id.has_value()) return;  // the cache is full
  auto* a = plan->add_new_cache_ids();
  a->set_name(meta.name());
  a->set_process_set(meta.process_set());
  a->set_cache_id(*id);
}

void Planner::AttachDeviceComm(const std::vector<kolo::v1::PlannedResponse*>& device_responses) {
  for (kolo::v1::PlannedResponse* response : device_responses) {
    if (!device_comm_planned_) {
      device_comm_planned_ = true;
      absl::StatusOr<kolo::v1::DeviceComm> comm = MakeDeviceComm();
      if (comm.ok()) {
        *response->mutable_device_comm() = *std::move(comm);
        continue;
      }
      device_comm_error_ =
          absl::Status(comm.status().code(), absl::StrCat("job ", job_id_,
                                                          ": no NCCL communicator for device "
                                                          "tensors: ",
                                                          comm.status().message()));
    }
    if (!device_comm_error_.ok()) {
      response->set_error_code(static_cast<int>(device_comm_error_.code()));
      response->set_error_message(std::string(device_comm_error_.message()));
    }
  }
}

absl::StatusOr<int> Planner::ChangeSet(const kolo::v1::TensorMeta& meta, kolo::v1::Plan* plan) {
  const std::vector<int64_t> aux(meta.aux().begin(), meta.aux().end());
  if (KindOf(meta) == CollectiveKind::kRemoveProcessSet) {
    const int id = plan::RemovedSetId(aux);
    if (absl::Status removed = sets_.Remove(id); !removed.ok()) {
      return plan::SetChangeError(KindOf(meta), meta.name(), removed);
    }
    // Its names still waiting fail on every node that has them.
    for (const kolo::v1::TensorMeta& waiting : readiness_.TakeWaitingOfSet(id)) {
      AddErrorResponse(
          waiting, absl::FailedPreconditionError(absl::StrCat("process set ", id, " was removed")),
          plan);
    }
    return 0;
  }
  absl::StatusOr<int> added = sets_.Add(aux);
  if (!added.ok()) return plan::SetChangeError(KindOf(meta), meta.name(), added.status());
  return added;
}

absl::StatusOr<kolo::v1::DeviceComm> Planner::MakeDeviceComm() const {
  absl::StatusOr<std::vector<RankDevices>> nodes = members_.DeviceLayouts();
  if (!nodes.ok()) return nodes.status();
  if (!options_.new_device_comm_id) {
    return absl::UnimplementedError("the coordinating kolod cannot make NCCL communicators");
  }
  absl::StatusOr<std::string> id = options_.new_device_comm_id();
  if (!id.ok()) return id.status();
  absl::StatusOr<DeviceCommPlan> plan = MakeDeviceCommPlan(size_, *nodes, *std::move(id));
  if (!plan.ok()) return plan.status();
  kolo::v1::DeviceComm comm;
  comm.set_unique_id(plan->unique_id);
  comm.set_nranks(plan->nranks);
  for (int r : plan->nccl_rank) comm.add_nccl_rank(r);
  for (int d : plan->device) comm.add_device(d);
  return comm;
}

}  // namespace kolo::daemon
