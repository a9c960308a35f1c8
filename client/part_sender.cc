#include "client/part_sender.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "client/parts_rule.h"
#include "common/start_thread.h"

namespace kolo {

// Tensors that go in parts (parts_rule.h) travel in parts of kPartBytes,
// each a request of its own, at most kPartsInFlight in flight while they
// are copied through the arena: the copy in, kolod's reduction and the
// copy out then work on a few MiB that stay in the cache, instead of three
// passes over the whole tensor in memory (docs/internals.md has the
// figures). Every part carries the whole shape (abi kSlotFlagPart), so
// kolod checks the ranks agree on it. The first part goes under the
// tensor's own name and is awaited before the others (named with abi
// kPartSeparator and their number): a tensor the ranks disagree on fails
// there, as a whole tensor would, and no rank is left with parts the
// others never send.
bool PartSender::InParts(const SubmitSpec& spec) const {
  const ClientOptions& options = session_->options();
  return GoesInParts(
      PartsQuestion{.kind = spec.kind,
                    .bytes = spec.input.byte_size(),
                    .name_bytes = spec.name.size(),
                    .on_device = OnDevice(spec),
                    .grouped = spec.group_size != 0,
                    .one_node = options.local_size == options.size,
                    .daemon_takes = session_->tensor_parts(),
                    .has_buffers = spec.input.data != nullptr && spec.output.data != nullptr});
}

absl::StatusOr<Handle> PartSender::Submit(const SubmitSpec& spec) {
  const uint64_t esize = DTypeSize(spec.input.dtype);
  const uint64_t bytes = spec.input.byte_size();
  auto w = std::make_unique<Whole>();
  w->name = std::string(spec.name);
  w->spec = spec;
  w->spec.name = w->name;
  w->part_elems = kPartBytes / esize;
  w->parts = (bytes / esize + w->part_elems - 1) / w->part_elems;
  w->parts_left = w->parts;
  w->in_flight = 1;  // the first part, sent here
  // Tensors kolod reads where they are (in the arena) go at once and fuse;
  // only copies gain from the bounded window.
  w->copied = !queue_->InArena(spec.input.data, bytes) || !queue_->InArena(spec.output.data, bytes);
  const uint64_t whole = queue_->NextId();
  std::string name;
  const SubmitSpec first = PartSpec(*w, 0, &name);
  {
    absl::MutexLock l(&mu_);
    if (pump_stop_) return session_->DeadStatus();  // closed
    if (!pump_.joinable()) {
      absl::StatusOr<std::thread> pump =
          StartThread("the client's part pump", "kolo-parts", [this] { Pump(); });
      // Nothing was sent yet: the call fails, as when the ring refuses it.
      if (!pump.ok()) return pump.status();
      pump_ = std::move(*pump);
    }
    wholes_[whole] = std::move(w);
  }
  queue_->AddWhole(whole, spec);
  absl::StatusOr<Handle> h = queue_->Enqueue(first, whole, 0);
  if (!h.ok()) {
    // Nothing was sent: the call fails, as for a whole tensor.
    queue_->RemoveWhole(whole);
    absl::MutexLock l(&mu_);
    wholes_.erase(whole);
    return h.status();
  }
  return Handle{whole};
}

void PartSender::Stop() {
  std::thread pump;
  {
    absl::MutexLock l(&mu_);
    pump_stop_ = true;
    pump = std::move(pump_);
  }
  if (pump.joinable()) pump.join();
}

SubmitSpec PartSender::PartSpec(const Whole& w, uint64_t i, std::string* name) {
  const SubmitSpec& spec = w.spec;
  const uint64_t esize = DTypeSize(spec.input.dtype);
  const uint64_t first = i * w.part_elems;
  const uint64_t elems = spec.input.byte_size() / esize;
  const int64_t n = static_cast<int64_t>(std::min(w.part_elems, elems - first));
  const uint64_t at = first * esize;
  *name = i == 0 ? w.name : absl::StrCat(w.name, absl::string_view(&abi::v1::kPartSeparator, 1), i);
  SubmitSpec part = spec;
  part.name = *name;
  part.part_of = spec.input.shape;
  part.input = ConstTensorView{
      static_cast<const uint8_t*>(spec.input.data) + at, spec.input.dtype, {n}, spec.input.device};
  part.output = TensorView{
      static_cast<uint8_t*>(spec.output.data) + at, spec.output.dtype, {n}, spec.output.device};
  return part;
}

std::optional<absl::Status> PartSender::PartDoneLocked(uint64_t whole, const absl::Status& status) {
  auto it = wholes_.find(whole);
  if (it == wholes_.end()) return std::nullopt;  // the caller gave up on it (a dead session)
  Whole& w = *it->second;
  w.status.Update(status);
  if (--w.parts_left > 0) return std::nullopt;
  absl::Status done = w.status;
  wholes_.erase(it);
  return done;
}

// ---- PartHooks ----

std::optional<absl::Status> PartSender::PartCompleted(uint64_t whole, bool first,
                                                      const absl::Status& status) {
  absl::MutexLock l(&mu_);
  auto it = wholes_.find(whole);
  if (it == wholes_.end()) return std::nullopt;
  --it->second->in_flight;
  if (first) it->second->first_done = true;
  kick_due_ = true;
  return PartDoneLocked(whole, status);
}

void PartSender::PartsProgressed() {
  {
    absl::MutexLock l(&mu_);
    // (A thread waiting on a handle sends parts itself; the pump stands by.)
    if (!std::exchange(kick_due_, false) || waiting_ > 0) return;
    pump_kick_.store(true, std::memory_order_release);
    if (std::this_thread::get_id() == pump_.get_id()) return;
  }
  // The pump sleeps on the completion doorbell; another thread drained its
  // completion, so it rings it.
  queue_->WakeCompletionSleepers();
}

void PartSender::Abandoned(uint64_t whole) {
  absl::MutexLock l(&mu_);
  wholes_.erase(whole);
}

bool PartSender::FirstDone(uint64_t whole) const {
  absl::MutexLock l(&mu_);
  auto it = wholes_.find(whole);
  return it != wholes_.end() && it->second->first_done;
}

void PartSender::BeginWait() {
  absl::MutexLock l(&mu_);
  ++waiting_;
}

void PartSender::EndWait() {
  absl::MutexLock l(&mu_);
  --waiting_;
}

void PartSender::SendParts() {
  bool sent = false;
  Advance(&sent);
}

// ---- Sending ----

std::vector<PartSender::Send> PartSender::TakeSendsLocked(Finished* finished) {
  std::vector<Send> sends;
  std::vector<uint64_t> failed;
  for (auto& [id, w] : wholes_) {
    if (!w->first_done) continue;
    if (!w->status.ok()) {
      failed.push_back(id);  // the ranks disagreed on it, or a part failed
      continue;
    }
    while (w->next < w->parts && (!w->copied || w->in_flight < kPartsInFlight)) {
      Send s;
      s.whole = id;
      s.part = w->next++;
      s.spec = PartSpec(*w, s.part, &s.name);
      sends.push_back(std::move(s));
      ++w->in_flight;
    }
  }
  for (uint64_t id : failed) {
    // Every rank's first part failed alike: no rank sends the rest.
    Whole& w = *wholes_[id];
    const uint64_t unsent = w.parts - w.next;
    w.next = w.parts;
    const absl::Status why = w.status;
    for (uint64_t j = 0; j < unsent; ++j) {
      if (std::optional<absl::Status> done = PartDoneLocked(id, why); done.has_value()) {
        finished->emplace_back(id, *std::move(done));
        break;  // (the whole is gone)
      }
    }
  }
  return sends;
}

void PartSender::Complete(const Finished& finished) {
  for (const auto& [id, status] : finished) queue_->CompleteWhole(id, status);
}

bool PartSender::Advance(bool* sent) {
  queue_->Drain();
  Finished finished;
  std::vector<Send> sends;
  bool active = false;
  {
    absl::MutexLock l(&mu_);
    sends = TakeSendsLocked(&finished);
    active = !wholes_.empty();
  }
  Complete(finished);
  for (Send& s : sends) {
    s.spec.name = s.name;  // the vector may have moved the string
    absl::StatusOr<Handle> h = queue_->Enqueue(s.spec, s.whole, s.part);
    if (h.ok()) continue;
    Finished failed;
    {
      absl::MutexLock l(&mu_);
      if (auto w = wholes_.find(s.whole); w != wholes_.end()) --w->second->in_flight;
      if (auto done = PartDoneLocked(s.whole, h.status()); done.has_value()) {
        failed.emplace_back(s.whole, *std::move(done));
      }
    }
    Complete(failed);
  }
  *sent = !sends.empty();
  return active;
}

bool PartSender::PumpHasWork() const {
  return pump_stop_ || (!wholes_.empty() && waiting_ == 0);
}

void PartSender::Pump() {
  for (;;) {
    {
      absl::MutexLock l(&mu_);
      mu_.Await(absl::Condition(this, &PartSender::PumpHasWork));
      if (pump_stop_) return;
      pump_kick_.store(false, std::memory_order_relaxed);
    }
    bool sent = false;
    if (!Advance(&sent) || sent) continue;
    queue_->SleepForCompletions(absl::Now() + SubmissionQueue::kMaxSleep,
                                [this] { return pump_kick_.load(std::memory_order_acquire); });
  }
}

}  // namespace kolo
