#include "daemon/request_table.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kolo::daemon {
namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
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
    if (r.shape != first.shape) {
      return Mismatch(first, r, "shape", ShapeString(first.shape),
                      ShapeString(r.shape));
    }
    if (first.kind == CollectiveKind::kAllreduce) {
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
    } else if (r.root_rank != first.root_rank) {
      return Mismatch(first, r, "root rank", absl::StrCat(first.root_rank),
                      absl::StrCat(r.root_rank));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<ReadySet>> RequestTable::Add(Request& request) {
  auto [it, inserted] = entries_.try_emplace(request.name);
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
  slot = std::move(request);
  if (++e.count < size_) return std::optional<ReadySet>();

  ReadySet ready;
  ready.name = it->first;
  ready.first_submitted = e.first_submitted;
  ready.ready_at = slot->submitted_at;
  ready.requests.reserve(size_);
  for (auto& r : e.by_rank) ready.requests.push_back(std::move(*r));
  entries_.erase(it);
  ready.agreement = CheckAgreement(ready.requests);
  return std::optional<ReadySet>(std::move(ready));
}

std::vector<Request> RequestTable::TakeAll() {
  std::vector<Request> out;
  for (auto& [name, e] : entries_) {
    for (auto& r : e.by_rank) {
      if (r.has_value()) out.push_back(std::move(*r));
    }
  }
  entries_.clear();
  return out;
}

std::vector<PendingView> RequestTable::Pending() const {
  std::vector<PendingView> out;
  for (const auto& [name, e] : entries_) {
    PendingView v;
    v.name = name;
    v.first_submitted = e.first_submitted;
    for (int r = 0; r < size_; ++r) {
      if (e.by_rank[r].has_value()) {
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
