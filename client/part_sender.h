// PartSender: large tensors sent in parts. Large host allreduce and
// broadcast tensors of a one-node job go as a sequence of part requests
// (parts_rule.h says which); this sends the first, keeps what the rest
// need, and sends them as earlier ones complete — from a thread that waits
// on or tests a handle, else from the part pump, a thread of its own
// started with the first tensor in parts.
//
// Thread-safety: thread-safe. mu_ guards the tensors in parts, the count
// of waiting threads and the pump's lifecycle. Lock order: the queue's
// completion_mu_ before mu_ (the queue calls the PartHooks with it held);
// mu_ is never held while calling into the queue.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "client/session.h"
#include "client/submission_queue.h"
#include "client/submit_spec.h"
#include "kolo/kolo.h"

namespace kolo {

class PartSender : public PartHooks {
 public:
  PartSender(const Session* session, SubmissionQueue* queue) : session_(session), queue_(queue) {}
  ~PartSender() override { Stop(); }
  PartSender(const PartSender&) = delete;
  PartSender& operator=(const PartSender&) = delete;

  // Whether `spec` (checked) goes in parts.
  bool InParts(const SubmitSpec& spec) const;
  // Submits `spec` in parts; the handle completes when every part has.
  absl::StatusOr<Handle> Submit(const SubmitSpec& spec);
  // Stops and joins the pump; tensors in parts are no longer sent.
  void Stop();

  // PartHooks.
  std::optional<absl::Status> PartCompleted(uint64_t whole, bool first,
                                            const absl::Status& status) override;
  void PartsProgressed() override;
  void Abandoned(uint64_t whole) override;
  bool FirstDone(uint64_t whole) const override;
  void BeginWait() override;
  void EndWait() override;
  void SendParts() override;

 private:
  // A tensor in parts whose parts are not all complete.
  struct Whole {
    SubmitSpec spec;  // spec.name views `name`
    std::string name;
    uint64_t parts = 0;
    uint64_t part_elems = 0;
    uint64_t next = 1;  // the next part to send
    uint32_t in_flight = 0;
    bool copied = false;  // the parts are copied through the arena
    bool first_done = false;
    uint64_t parts_left = 0;  // not yet complete
    absl::Status status;      // the first failure of a part
  };
  // A part to send once mu_ is released.
  struct Send {
    uint64_t whole = 0;
    uint64_t part = 0;
    SubmitSpec spec;
    std::string name;
  };
  // Wholes every part of which completed, to complete in the queue once
  // mu_ is released.
  using Finished = std::vector<std::pair<uint64_t, absl::Status>>;

  // Part `i` of `w`; its name is kept in `*name`.
  static SubmitSpec PartSpec(const Whole& w, uint64_t i, std::string* name);
  // A part of `whole` completed (or will never be sent) with `status`;
  // returns the whole's status when it was the last.
  std::optional<absl::Status> PartDoneLocked(uint64_t whole, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The parts that may go now, and the wholes whose first part failed
  // (every rank's alike: no rank sends the rest) ended.
  std::vector<Send> TakeSendsLocked(Finished* finished) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drains completions and sends the parts that may go now (any thread);
  // returns whether tensors in parts remain, `*sent` whether it sent any.
  bool Advance(bool* sent);
  void Complete(const Finished& finished);
  // The pump's thread: sends the parts after the first, at most
  // kPartsInFlight of a tensor at a time, as earlier ones complete.
  void Pump();
  bool PumpHasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Session* const session_;
  SubmissionQueue* const queue_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Whole>> wholes_ ABSL_GUARDED_BY(mu_);
  bool pump_stop_ ABSL_GUARDED_BY(mu_) = false;
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;     // threads between BeginWait and EndWait
  bool kick_due_ ABSL_GUARDED_BY(mu_) = false;  // a part completed in this drain
  std::thread pump_ ABSL_GUARDED_BY(mu_);    // started with the first tensor in parts
  std::atomic<bool> pump_kick_{false};       // a part completed since the pump last looked
};

}  // namespace kolo
