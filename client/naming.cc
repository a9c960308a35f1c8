#include "client/naming.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kolo/kolo.h"
#include "proto/kolo/abi/shm_abi_v1.h"

namespace kolo {

absl::Status Naming::CheckName(std::string_view name) {
  if (name.empty() || name.size() > abi::v1::kMaxNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("collective name must be 1 to ", abi::v1::kMaxNameBytes, " bytes"));
  }
  return absl::OkStatus();
}

bool Naming::KolodTakes(std::string_view name) {
  if (name.empty() || name.size() > abi::v1::kMaxNameBytes) return false;
  for (char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) return false;
  }
  return true;
}

uint64_t Naming::Next(const std::string& key) {
  absl::MutexLock l(&mu_);
  return counters_[key]++;
}

std::string Naming::NextBarrier(int process_set) {
  return absl::StrCat("barrier.", process_set, ".", Next(absl::StrCat("barrier.", process_set)));
}

std::string Naming::NextJoin() { return absl::StrCat("join.", Next("join")); }

std::string Naming::NextProcessSetAdd() {
  return absl::StrCat("process_set.add.", Next("process_set"));
}

std::string Naming::NextProcessSetRemove() {
  return absl::StrCat("process_set.remove.", Next("process_set"));
}

uint64_t Naming::NextGroup(int process_set) {
  return Next(absl::StrCat("group.", process_set)) + 1;
}

void Naming::ResetProcessSets(int size) {
  std::vector<int> all(size);
  for (int r = 0; r < size; ++r) all[r] = r;
  absl::MutexLock l(&mu_);
  process_sets_.clear();
  process_sets_[kGlobalProcessSet] = std::move(all);
}

void Naming::AddProcessSet(int id, std::vector<int> sorted_ranks) {
  absl::MutexLock l(&mu_);
  process_sets_[id] = std::move(sorted_ranks);
}

void Naming::RemoveProcessSet(int id) {
  absl::MutexLock l(&mu_);
  process_sets_.erase(id);
}

absl::StatusOr<int> Naming::ProcessSetRank(int process_set, int rank) const {
  absl::MutexLock l(&mu_);
  auto it = process_sets_.find(process_set);
  if (it == process_sets_.end()) {
    return absl::NotFoundError(absl::StrCat("no process set ", process_set));
  }
  auto pos = std::lower_bound(it->second.begin(), it->second.end(), rank);
  if (pos == it->second.end() || *pos != rank) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", rank, " is not in process set ", process_set));
  }
  return static_cast<int>(pos - it->second.begin());
}

absl::StatusOr<int> Naming::ProcessSetSize(int process_set) const {
  absl::MutexLock l(&mu_);
  auto it = process_sets_.find(process_set);
  if (it == process_sets_.end()) {
    return absl::NotFoundError(absl::StrCat("no process set ", process_set));
  }
  return static_cast<int>(it->second.size());
}

}  // namespace kolo
