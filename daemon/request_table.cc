#include "daemon/request_table.h"

#include <utility>

#include "absl/time/clock.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kolo::daemon {
namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

std::string DeviceString(const Request& r) {
  return r.device.has_value() ? absl::StrCat("a tensor on CUDA device ", r.device->input.device)
                              : std::string("a tensor in host memory");
}

absl::Status Mismatch(const Request& first, const Request& other,
                      absl::string_view what, absl::string_view a,
                      absl::string_view b) {
  return absl::FailedPreconditionError(absl::StrCat(
      CollectiveKindName(first.kind), " \"", first.name, "\": rank ",
      other.rank, " sent ", what, " ", b, ", rank ", first.rank, " sent ", a));
}

}  // namespace

absl::Status CheckAgreement(const std::vector<Request>& requests) {
  const Request& first = requests.front();
  for (const Request& r : requests) {
    if (r.kind != first.kind) {
      return Mismatch(first, r, "collective", CollectiveKindName(first.kind),
                      CollectiveKindName(r.kind));
    }
    if (r.dtype != first.dtype) {
      return Mismatch(first, r, "dtype", DTypeName(first.dtype),
                      DTypeName(r.dtype));
    }
    // Ranks on different GPUs agree: each GPU is one NCCL rank of the job's
    // communicator (see daemon/backend/device_comm_plan.h).
    if (r.device.has_value() != first.device.has_value()) {
      return absl::FailedPreconditionError(absl::StrCat(
          CollectiveKindName(first.kind), " \"", first.name, "\": rank ", r.rank, " sent ",
          DeviceString(r), ", rank ", first.rank, " sent ", DeviceString(first)));
    }
    if (r.group_size != first.group_size) {
      return Mismatch(first, r, "group size", absl::StrCat(first.group_size),
                      absl::StrCat(r.group_size));
    }
    switch (first.kind) {
      case CollectiveKind::kAllgather:
      case CollectiveKind::kAlltoall: {
        // The first dimension may differ; the rest must not.
        std::vector<int64_t> a(first.shape.begin() + 1, first.shape.end());
        std::vector<int64_t> b(r.shape.begin() + 1, r.shape.end());
        if (a != b) {
          return Mismatch(first, r, "shape", ShapeString(first.shape),
                          ShapeString(r.shape));
        }
        break;
      }
      case CollectiveKind::kAddProcessSet:
        if (r.aux != first.aux) {
          return Mismatch(first, r, "ranks",
                          absl::StrCat("[", absl::StrJoin(first.aux, ","), "]"),
                          absl::StrCat("[", absl::StrJoin(r.aux, ","), "]"));
        }
        break;
      default:
        if (r.shape != first.shape) {
          return Mismatch(first, r, "shape", ShapeString(first.shape),
                          ShapeString(r.shape));
        }
    }
    if (first.kind == CollectiveKind::kAllreduce ||
        first.kind == CollectiveKind::kReducescatter) {
      if (r.op != first.op) {
        return Mismatch(first, r, "op", ReduceOpName(first.op),
                        ReduceOpName(r.op));
      }
      if (r.prescale != first.prescale) {
        return Mismatch(first, r, "prescale", absl::StrCat(first.prescale),
                        absl::StrCat(r.prescale));
      }
      if (r.postscale != first.postscale) {
        return Mismatch(first, r, "postscale", absl::StrCat(first.postscale),
                        absl::StrCat(r.postscale));
      }
      if (r.compression != first.compression) {
        return Mismatch(first, r, "compression",
                        absl::StrCat(static_cast<int>(first.compression)),
                        absl::StrCat(static_cast<int>(r.compression)));
      }
    } else if (first.kind == CollectiveKind::kBroadcast &&
               r.root_rank != first.root_rank) {
      return Mismatch(first, r, "root rank", absl::StrCat(first.root_rank),
                      absl::StrCat(r.root_rank));
    }
  }
  return absl::OkStatus();
}

bool RequestTable::Complete(const Entry& e, const std::vector<int>& required) {
  for (int r : required) {
    if (r < 0 || r >= static_cast<int>(e.by_rank.size()) || !e.by_rank[r].has_value()) {
      return false;
    }
  }
  return true;
}

ReadySet RequestTable::Take(absl::flat_hash_map<Key, Entry>::iterator it,
                            absl::Time now) {
  Entry& e = it->second;
  ReadySet ready;
  ready.process_set = it->first.first;
  ready.name = it->first.second;
  ready.first_submitted = e.first_submitted;
  ready.ready_at = now;
  ready.requests.reserve(e.count);
  for (auto& r : e.by_rank) {
    if (r.has_value()) ready.requests.push_back(std::move(*r));
  }
  entries_.erase(it);
  ready.agreement = CheckAgreement(ready.requests);
  return ready;
}

absl::StatusOr<std::optional<ReadySet>> RequestTable::Add(Request& request) {
  std::vector<int> all(size_);
  for (int r = 0; r < size_; ++r) all[r] = r;
  return Add(request, all);
}

absl::StatusOr<std::optional<ReadySet>> RequestTable::Add(
    Request& request, const std::vector<int>& required) {
  auto [it, inserted] =
      entries_.try_emplace(Key(request.process_set, request.name));
  Entry& e = it->second;
  if (inserted) {
    e.by_rank.resize(size_);
    e.first_submitted = request.submitted_at;
  }
  std::optional<Request>& slot = e.by_rank[request.rank];
  if (slot.has_value()) {
    return absl::AlreadyExistsError(absl::StrCat(
        CollectiveKindName(request.kind), " \"", request.name,
        "\": rank ", request.rank,
        " submitted this name again while it is still in flight"));
  }
  absl::Time at = request.submitted_at;
  slot = std::move(request);
  ++e.count;
  if (!Complete(e, required)) return std::optional<ReadySet>();
  return std::optional<ReadySet>(Take(it, at));
}

std::vector<ReadySet> RequestTable::TakeReady(
    const std::function<std::vector<int>(int process_set)>& required_for) {
  std::vector<Key> ready_keys;
  for (const auto& [key, e] : entries_) {
    if (Complete(e, required_for(key.first))) ready_keys.push_back(key);
  }
  std::vector<ReadySet> out;
  absl::Time now = absl::Now();
  for (const Key& k : ready_keys) out.push_back(Take(entries_.find(k), now));
  return out;
}

std::vector<Request> RequestTable::TakeAll() {
  std::vector<Request> out;
  for (auto& [key, e] : entries_) {
    for (auto& r : e.by_rank) {
      if (r.has_value()) out.push_back(std::move(*r));
    }
  }
  entries_.clear();
  return out;
}

std::vector<Request> RequestTable::TakeProcessSet(int process_set) {
  std::vector<Request> out;
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->first.first != process_set) {
      ++it;
      continue;
    }
    for (auto& r : it->second.by_rank) {
      if (r.has_value()) out.push_back(std::move(*r));
    }
    entries_.erase(it++);
  }
  return out;
}

std::vector<PendingView> RequestTable::Pending() const {
  return Pending([this](int) {
    std::vector<int> all(size_);
    for (int r = 0; r < size_; ++r) all[r] = r;
    return all;
  });
}

std::vector<PendingView> RequestTable::Pending(
    const std::function<std::vector<int>(int process_set)>& members_of) const {
  std::vector<PendingView> out;
  for (const auto& [key, e] : entries_) {
    PendingView v;
    v.process_set = key.first;
    v.name = key.second;
    v.first_submitted = e.first_submitted;
    for (int r : members_of(key.first)) {
      if (r >= 0 && r < size_ && e.by_rank[r].has_value()) {
        v.kind = e.by_rank[r]->kind;
        v.submitted.push_back(r);
      } else {
        v.missing.push_back(r);
      }
    }
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace kolo::daemon
