#include "daemon/session/shares.h"

#include "absl/strings/str_cat.h"

namespace kolo::daemon {

Shares::Lease& Shares::Lease::operator=(Lease&& o) noexcept {
  if (this != &o) {
    Reset();
    shares_ = std::exchange(o.shares_, nullptr);
    identity_ = std::move(o.identity_);
  }
  return *this;
}

void Shares::Lease::Reset() {
  if (shares_ != nullptr) std::exchange(shares_, nullptr)->Give(identity_);
}

absl::StatusOr<Shares::Lease> Shares::Take(absl::string_view identity) {
  absl::MutexLock l(&mu_);
  auto it = held_.find(identity);
  const int mine = it == held_.end() ? 0 : it->second;
  if (mine >= limits_.per_identity) {
    return absl::ResourceExhaustedError(
        absl::StrCat(identity, " holds ", mine, " ", what_, ", its whole share (", knob_, "=",
                     limits_.per_identity, "): this one is refused until one of them ends"));
  }
  if (total_ >= limits_.total) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "kolod holds ", total_, " ", what_, ", all it takes (each identity may hold ",
        limits_.per_identity, "; ", identity, " holds ", mine, "): this one is refused"));
  }
  ++held_[identity];
  ++total_;
  return Lease(this, std::string(identity));
}

void Shares::Give(const std::string& identity) {
  absl::MutexLock l(&mu_);
  auto it = held_.find(identity);
  if (it == held_.end()) return;  // cannot happen: a lease holds one
  if (--it->second == 0) held_.erase(it);
  --total_;
}

int Shares::held(absl::string_view identity) const {
  absl::MutexLock l(&mu_);
  auto it = held_.find(identity);
  return it == held_.end() ? 0 : it->second;
}

int Shares::total_held() const {
  absl::MutexLock l(&mu_);
  return total_;
}

}  // namespace kolo::daemon
