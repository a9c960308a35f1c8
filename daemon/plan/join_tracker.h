// Which members of a job have joined (hvd.join: a rank that ran out of data
// takes part with zeros until every rank has), and which rank joined last.
// A job counts its ranks here; the coordinator counts nodes all of whose
// ranks have joined. Both ask the same questions of it: has this one joined,
// how many of a set's members have, has anyone, has everyone.
//
// Thread-safety: not thread-safe; its owner's lock guards it.
#pragma once

#include <vector>

namespace kolo::daemon::plan {

class JoinTracker {
 public:
  // `members` ranks (or nodes), none joined.
  explicit JoinTracker(int members = 0) { Reset(members); }

  int size() const { return static_cast<int>(joined_.size()); }
  // Marks `member` joined, `last_rank` the last rank to join so far. False
  // (and nothing changes) when it had joined already or is out of range.
  bool Join(int member, int last_rank);
  bool joined(int member) const;
  bool any() const { return count_ > 0; }
  bool all() const { return count_ == size() && size() > 0; }
  // The last rank to join since the last reset; -1 when none has.
  int last_rank() const { return last_rank_; }
  // Of `members` (ascending or not), those that joined, in their order.
  std::vector<int> JoinedIn(const std::vector<int>& members) const;
  int CountIn(const std::vector<int>& members) const;

  // Every member joined and the join completed: none has joined any more.
  void Reset() { Reset(size()); }
  void Reset(int members);

 private:
  std::vector<bool> joined_;
  int count_ = 0;
  int last_rank_ = -1;
};

}  // namespace kolo::daemon::plan
