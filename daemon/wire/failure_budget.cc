#include "daemon/wire/failure_budget.h"

#include "absl/strings/str_cat.h"

namespace kolo::daemon {

absl::Status FailureBudget::Check(const std::string& peer, absl::Time now) const {
  absl::MutexLock l(&mu_);
  auto it = peers_.find(peer);
  if (it == peers_.end() || it->second.refused_until <= now) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "peer ", peer, " had more than ", limits_.max_failures,
      " Peer streams fail authentication (wrong job token, unknown job or bad first message) "
      "within ",
      absl::FormatDuration(limits_.window), "; it is refused for another ",
      absl::FormatDuration(absl::Ceil(it->second.refused_until - now, absl::Seconds(1)))));
}

bool FailureBudget::ExpiredLocked(const Entry& e, absl::Time now) const {
  return e.refused_until <= now && now - e.window_start >= limits_.window;
}

bool FailureBudget::MakeRoomLocked(absl::Time now) {
  if (peers_.size() < limits_.max_tracked) return true;
  absl::erase_if(peers_, [&](const auto& kv) { return ExpiredLocked(kv.second, now); });
  if (peers_.size() < limits_.max_tracked) return true;
  auto oldest = peers_.end();
  for (auto it = peers_.begin(); it != peers_.end(); ++it) {
    if (it->second.refused_until > now) continue;
    if (oldest == peers_.end() || it->second.last_failure < oldest->second.last_failure) {
      oldest = it;
    }
  }
  if (oldest == peers_.end()) return false;
  peers_.erase(oldest);
  return true;
}

bool FailureBudget::RecordFailure(const std::string& peer, absl::Time now) {
  absl::MutexLock l(&mu_);
  auto it = peers_.find(peer);
  if (it == peers_.end()) {
    if (!MakeRoomLocked(now)) return false;  // untracked: every slot holds a refused peer
    it = peers_.emplace(peer, Entry{now, 0, absl::InfinitePast(), now}).first;
  }
  Entry& e = it->second;
  if (e.refused_until > now) return false;  // already refused; its streams are not read
  if (now - e.window_start >= limits_.window) {
    e.window_start = now;
    e.failures = 0;
  }
  e.last_failure = now;
  if (++e.failures <= limits_.max_failures) return false;
  e.refused_until = now + limits_.backoff;
  // Counting starts afresh once the refusal is over.
  e.window_start = e.refused_until;
  e.failures = 0;
  return true;
}

size_t FailureBudget::tracked() const {
  absl::MutexLock l(&mu_);
  return peers_.size();
}

}  // namespace kolo::daemon
