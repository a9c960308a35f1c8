// IngressGroup: the sessions of one job on this node take turns reading all
// of the job's submission rings, so that at most one kolod thread per job
// spins while its ranks are busy, instead of one per rank.
//
// Each session keeps its own ingress thread. A thread that sees activity
// becomes the group's leader (if there is none) and polls every member's
// ring until nothing arrived for the spin time; then it resigns and every
// thread sleeps on its own session's doorbell again. While a leader polls,
// the other sessions' threads wait on the group (not on their clients'
// doorbells, so a client's submission costs it no system call). On a node
// with eight ranks this is one busy core instead of eight; on a node with
// fewer cores than busy threads it also leaves the cores to the ranks
// (a small allreduce of 2 ranks on 2 cores: see docs/internals.md).
//
// Thread-safety: thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace kolo::daemon {

// One session's ring, as the group polls it.
class IngressMember {
 public:
  virtual ~IngressMember() = default;
  // Reads and hands on what the member's client submitted, unless another
  // thread is reading this ring right now; returns the slots read.
  virtual int Poll() = 0;
  // Whether the client has submitted something not read yet (a cheap look).
  virtual bool HasPending() const = 0;
};

class IngressGroup {
 public:
  // `member` must stay valid until Remove(member) returned. Add and Remove
  // wait for a PollAll round in progress.
  void Add(IngressMember* member);
  // Once Remove returns, no thread of the group polls `member` again (a
  // poll of it in progress has ended).
  void Remove(const IngressMember* member);

  // True when the caller became the leader; it must Resign later.
  bool TryLead();
  void Resign();
  bool led() const { return leader_.load(std::memory_order_acquire) != 0; }
  // Polls every member with something pending (the leader only); returns
  // the slots read. When nothing was read, looks up to `looks` more times,
  // a pause apart.
  int PollAll(int looks = 0);
  // Sleeps while another thread leads: until it resigns, Wake is called,
  // or `timeout` passes.
  void WaitWhileLed(absl::Duration timeout);
  // Wakes every thread in WaitWhileLed (a session is closing).
  void Wake();

 private:
  // Held by the leader through one PollAll round, and by Add and Remove:
  // once Remove has it, no round is polling the member it removes.
  absl::Mutex poll_mu_;
  std::vector<IngressMember*> members_ ABSL_GUARDED_BY(poll_mu_);

  std::atomic<uint32_t> leader_{0};
  std::atomic<uint32_t> seq_{0};  // futex word of WaitWhileLed
  std::atomic<uint32_t> waiters_{0};
};

}  // namespace kolo::daemon
