#include "daemon/session/handoff_table.h"

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/random_id.h"

namespace kolo::daemon {

void HandoffTable::ExpireLocked(absl::Time now) {
  std::vector<std::string> expired;
  for (const auto& [ticket, entry] : entries_) {
    if (entry.expires <= now) expired.push_back(ticket);
  }
  for (const std::string& ticket : expired) {
    auto it = entries_.find(ticket);
    if (--per_uid_[it->second.handoff.caller.uid] == 0)
      per_uid_.erase(it->second.handoff.caller.uid);
    entries_.erase(it);
  }
}

absl::StatusOr<std::string> HandoffTable::Deposit(Handoff handoff, absl::Time now) {
  absl::MutexLock l(&mu_);
  ExpireLocked(now);
  const uid_t uid = handoff.caller.uid;
  if (static_cast<int>(entries_.size()) >= limits_.max_waiting) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "kolod holds ", entries_.size(), " handoffs not yet attached; try again shortly"));
  }
  auto count = per_uid_.find(uid);
  if (count != per_uid_.end() && count->second >= limits_.max_waiting_per_uid) {
    return absl::ResourceExhaustedError(absl::StrCat("uid ", uid, " has ", count->second,
                                                     " handoffs not yet attached (limit ",
                                                     limits_.max_waiting_per_uid, ")"));
  }
  std::string ticket = RandomHex(16);
  ++per_uid_[uid];
  entries_[ticket] = Entry{std::move(handoff), now + limits_.ttl};
  return ticket;
}

absl::StatusOr<Handoff> HandoffTable::Redeem(const std::string& ticket, absl::Time now) {
  absl::MutexLock l(&mu_);
  ExpireLocked(now);
  auto it = entries_.find(ticket);
  if (it == entries_.end()) {
    return absl::PermissionDeniedError(
        "unknown or expired handoff ticket: attach with the Kolo client library");
  }
  Handoff out = std::move(it->second.handoff);
  entries_.erase(it);
  if (--per_uid_[out.caller.uid] == 0) per_uid_.erase(out.caller.uid);
  return out;
}

absl::StatusOr<ProcessCredentials> HandoffTable::Identify(const std::string& ticket,
                                                          absl::Time now) {
  absl::MutexLock l(&mu_);
  ExpireLocked(now);
  auto it = entries_.find(ticket);
  if (it == entries_.end()) {
    return absl::PermissionDeniedError("unknown or expired identity ticket");
  }
  return it->second.handoff.caller;
}

int HandoffTable::waiting() const {
  absl::MutexLock l(&mu_);
  return static_cast<int>(entries_.size());
}

}  // namespace kolo::daemon
