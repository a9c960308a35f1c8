#include "client/client_impl.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/process_set_rule.h"
#include "common/status_macros.h"
#include "proto/kolo/abi/collective_traits.h"

namespace kolo {

HostBuffer MakeHostBuffer(std::shared_ptr<HostBuffer::Arena> arena, void* data, uint64_t bytes,
                          DType dtype, std::vector<int64_t> shape, int64_t result_offset) {
  return ClientImpl::NewHostBuffer(std::move(arena), data, bytes, dtype, std::move(shape),
                                   result_offset);
}

absl::StatusOr<std::unique_ptr<ClientImpl>> ClientImpl::Connect(const ClientOptions& options) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", options.rank, " outside a job of size ", options.size));
  }
  std::unique_ptr<ClientImpl> c(new ClientImpl(options));
  KOLO_RETURN_IF_ERROR(c->queue_.MapSegment(options));
  KOLO_RETURN_IF_ERROR(c->session_.Attach(c->queue_.segment(), c->queue_.header()));
  // After the attach: an elastic job's size is kolod's to say.
  c->names_.ResetProcessSets(c->options().size);
  if (c->options().rank == 0) {
    for (const std::string& note : c->options().env_notes) {
      std::fprintf(stderr, "kolo: %s\n", note.c_str());
    }
    const ClientOptions::JobSettings& job = c->options().job;
    if (job.autotune && !job.autotune_log.empty()) {
      auto log = AutotuneLog::Start(
          job.autotune_log, [s = &c->session_](uint32_t since) { return s->JobAutotune(since); },
          absl::Milliseconds(200));
      if (!log.ok()) return log.status();
      c->autotune_log_ = *std::move(log);
    }
  }
  return c;
}

ClientImpl::~ClientImpl() {
  queue_.DetachArena();
  Close(/*rejoin=*/false);
}

void ClientImpl::Close(bool rejoin) {
  // The last samples come while the session is still there.
  if (autotune_log_ != nullptr) autotune_log_->Stop();
  session_.Close(rejoin);
  sender_.Stop();
}

absl::StatusOr<Handle> ClientImpl::Submit(const SubmitSpec& spec) {
  if (!spec.refused.ok()) return queue_.Refuse(spec, spec.refused);
  if (absl::Status s = CheckRootRank(spec, options().size); !s.ok()) return queue_.Refuse(spec, s);
  if (session_.Dead()) return session_.DeadStatus();
  if (absl::Status s = CheckSpec(spec); !s.ok()) return queue_.Refuse(spec, s);
  if (sender_.InParts(spec)) return sender_.Submit(spec);
  return queue_.Enqueue(spec);
}

absl::StatusOr<std::vector<Handle>> ClientImpl::SubmitGroup(std::vector<SubmitSpec> specs) {
  if (specs.empty()) return std::vector<Handle>();
  const uint64_t group = names_.NextGroup(specs.front().process_set);
  for (SubmitSpec& spec : specs) {
    spec.group_id = group;
    spec.group_size = static_cast<uint32_t>(specs.size());
  }
  // A member this rank refuses fails the whole group, here and on every
  // other rank (each member is refused, so no rank waits for the group).
  for (const SubmitSpec& spec : specs) {
    if (session_.Dead()) return session_.DeadStatus();
    absl::Status s = CheckSpec(spec);
    if (s.ok()) continue;
    const absl::Status why(s.code(),
                           absl::StrCat("grouped ", CollectiveKindName(spec.kind), ": member \"",
                                        std::string(spec.name), "\": ", s.message()));
    for (const SubmitSpec& member : specs) (void)queue_.Refuse(member, why);
    return why;
  }
  std::vector<Handle> handles;
  for (SubmitSpec& spec : specs) {
    auto h = Submit(spec);
    if (!h.ok()) {
      // The members already submitted can never run: the group is short.
      return absl::Status(
          h.status().code(),
          absl::StrCat("grouped collective: ", h.status().message(), " (", handles.size(), " of ",
                       specs.size(), " members submitted; the job must be restarted)"));
    }
    handles.push_back(*h);
  }
  return handles;
}

absl::StatusOr<int64_t> ClientImpl::RunControl(CollectiveKind kind, const std::string& name,
                                               int process_set, std::vector<int64_t> aux) {
  SubmitSpec spec{kind, ConstTensorView(nullptr, DType::kUint8, {0}), {}, name};
  spec.process_set = process_set;
  spec.aux = std::move(aux);
  KOLO_ASSIGN_OR_RETURN(Handle h, Submit(spec));
  return queue_.WaitValue(h);
}

absl::Status ClientImpl::Barrier(int process_set) {
  return RunControl(CollectiveKind::kBarrier, names_.NextBarrier(process_set), process_set, {})
      .status();
}

absl::StatusOr<int> ClientImpl::Join() {
  KOLO_ASSIGN_OR_RETURN(
      int64_t last, RunControl(CollectiveKind::kJoin, names_.NextJoin(), kGlobalProcessSet, {}));
  return static_cast<int>(last);
}

absl::StatusOr<int> ClientImpl::AddProcessSet(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  const std::vector<int64_t> aux(ranks.begin(), ranks.end());
  KOLO_RETURN_IF_ERROR(CheckProcessSetRanks(aux, options().size));
  KOLO_ASSIGN_OR_RETURN(int64_t id, RunControl(CollectiveKind::kAddProcessSet,
                                               names_.NextProcessSetAdd(), kGlobalProcessSet, aux));
  names_.AddProcessSet(static_cast<int>(id), std::move(ranks));
  return static_cast<int>(id);
}

absl::Status ClientImpl::RemoveProcessSet(int process_set) {
  if (process_set == kGlobalProcessSet) {
    return absl::InvalidArgumentError("the global process set cannot be removed");
  }
  KOLO_RETURN_IF_ERROR(RunControl(CollectiveKind::kRemoveProcessSet, names_.NextProcessSetRemove(),
                                  kGlobalProcessSet, {process_set})
                           .status());
  names_.RemoveProcessSet(process_set);
  return absl::OkStatus();
}

}  // namespace kolo
