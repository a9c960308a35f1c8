#include "daemon/plan/join_tracker.h"

namespace kolo::daemon::plan {

bool JoinTracker::Join(int member, int last_rank) {
  if (member < 0 || member >= size() || joined_[member]) return false;
  joined_[member] = true;
  ++count_;
  last_rank_ = last_rank;
  return true;
}

bool JoinTracker::joined(int member) const {
  return member >= 0 && member < size() && joined_[member];
}

std::vector<int> JoinTracker::JoinedIn(const std::vector<int>& members) const {
  std::vector<int> out;
  if (count_ == 0) return out;
  for (int m : members) {
    if (joined(m)) out.push_back(m);
  }
  return out;
}

int JoinTracker::CountIn(const std::vector<int>& members) const {
  if (count_ == 0) return 0;
  int n = 0;
  for (int m : members) n += joined(m) ? 1 : 0;
  return n;
}

void JoinTracker::Reset(int members) {
  joined_.assign(members < 0 ? 0 : members, false);
  count_ = 0;
  last_rank_ = -1;
}

}  // namespace kolo::daemon::plan
