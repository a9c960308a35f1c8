// ClientImpl's tensors in parts: large host allreduce and broadcast
// tensors of a one-node job sent as a sequence of part requests (see
// InParts below), and the part pump that sends the parts after the first.
#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "client/client_impl.h"
#include "client/parts_rule.h"
#include "common/futex.h"
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
bool ClientImpl::InParts(const SubmitSpec& spec, bool on_device) const {
  return GoesInParts(
      PartsQuestion{.kind = spec.kind,
                    .bytes = spec.input.byte_size(),
                    .name_bytes = spec.name.size(),
                    .on_device = on_device,
                    .grouped = spec.group_size != 0,
                    .one_node = options_.local_size == options_.size,
                    .daemon_takes = tensor_parts_,
                    .has_buffers = spec.input.data != nullptr && spec.output.data != nullptr});
}

absl::StatusOr<Handle> ClientImpl::SubmitInParts(const SubmitSpec& spec) {
  const uint64_t esize = DTypeSize(spec.input.dtype);
  const uint64_t bytes = spec.input.byte_size();
  auto w = std::make_unique<Whole>();
  w->name = std::string(spec.name);
  w->spec = spec;
  w->spec.name = w->name;
  w->part_elems = kPartBytes / esize;
  w->parts = (bytes / esize + w->part_elems - 1) / w->part_elems;
  w->in_flight = 1;  // the first part, sent here
  {
    // Tensors kolod reads where they are (in the arena) go at once and
    // fuse; only copies gain from the bounded window.
    absl::MutexLock l(&arena_->mu);
    w->copied =
        !arena_->Contains(spec.input.data, bytes) || !arena_->Contains(spec.output.data, bytes);
  }
  const uint64_t whole = next_id_.fetch_add(1, std::memory_order_relaxed);
  std::string name;
  SubmitSpec first = PartSpec(*w, 0, &name);
  {
    absl::MutexLock l(&completion_mu_);
    Pending p;
    p.kind = spec.kind;
    p.dtype = spec.input.dtype;
    p.process_set = spec.process_set;
    p.bytes = bytes;
    p.parts_left = w->parts;
    if (!pump_.joinable()) {
      absl::StatusOr<std::thread> pump =
          StartThread("the client's part pump", "kolo-parts", [this] { PumpParts(); });
      // Nothing was sent yet: the call fails, as when the ring refuses it.
      if (!pump.ok()) return pump.status();
      pump_ = std::move(*pump);
    }
    pending_[whole] = std::move(p);
    wholes_[whole] = std::move(w);
  }
  absl::StatusOr<Handle> h = SubmitOne(first, whole, 0);
  if (!h.ok()) {
    // Nothing was sent: the call fails, as for a whole tensor.
    absl::MutexLock l(&completion_mu_);
    pending_.erase(whole);
    wholes_.erase(whole);
    return h.status();
  }
  return Handle{whole};
}

SubmitSpec ClientImpl::PartSpec(const Whole& w, uint64_t i, std::string* name) {
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

void ClientImpl::PartDone(uint64_t whole, const absl::Status& status) {
  auto it = pending_.find(whole);
  if (it == pending_.end()) return;  // the caller gave up on it (a dead session)
  Pending& w = it->second;
  w.parts_status.Update(status);
  if (--w.parts_left > 0) return;
  Done d;
  d.status = w.parts_status;
  d.kind = w.kind;
  d.dtype = w.dtype;
  d.process_set = w.process_set;
  done_[whole] = std::move(d);
  pending_.erase(it);
  wholes_.erase(whole);
}

absl::StatusOr<bool> ClientImpl::Underway(Handle handle) {
  absl::MutexLock l(&completion_mu_);
  DrainLocked();
  if (done_.contains(handle.id) || Dead()) return true;  // (Wait reports a death)
  if (!pending_.contains(handle.id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown or already consumed handle ", handle.id));
  }
  // Every rank submitted the first part before it completed, and each
  // rank's later parts are sent by its waiting thread or its pump.
  auto w = wholes_.find(handle.id);
  return w != wholes_.end() && w->second->first_done;
}

bool ClientImpl::PumpHasWork() const { return pump_stop_ || (!wholes_.empty() && waiting_ == 0); }

bool ClientImpl::AdvanceParts(bool* sent) {
  struct Send {
    uint64_t whole = 0;
    uint64_t part = 0;
    SubmitSpec spec;
    std::string name;
  };
  std::vector<Send> sends;
  bool active = false;
  {
    absl::MutexLock l(&completion_mu_);
    DrainLocked();
    std::vector<uint64_t> failed, gone;
    for (auto& [id, w] : wholes_) {
      auto p = pending_.find(id);
      if (p == pending_.end()) {
        gone.push_back(id);  // a Wait gave up on it (a dead session)
      } else if (w->first_done && !p->second.parts_status.ok()) {
        failed.push_back(id);  // the ranks disagreed on it, or a part failed
      } else if (w->first_done) {
        while (w->next < w->parts && (!w->copied || w->in_flight < kPartsInFlight)) {
          Send s;
          s.whole = id;
          s.part = w->next++;
          s.spec = PartSpec(*w, s.part, &s.name);
          sends.push_back(std::move(s));
          ++w->in_flight;
        }
      }
    }
    for (uint64_t id : gone) wholes_.erase(id);
    for (uint64_t id : failed) {
      // Every rank's first part failed alike: no rank sends the rest.
      Whole& w = *wholes_[id];
      const uint64_t unsent = w.parts - w.next;
      w.next = w.parts;
      const absl::Status why = pending_[id].parts_status;
      for (uint64_t j = 0; j < unsent; ++j) PartDone(id, why);
    }
    active = !wholes_.empty();
  }
  for (Send& s : sends) {
    s.spec.name = s.name;  // the vector may have moved the string
    absl::StatusOr<Handle> h = SubmitOne(s.spec, s.whole, s.part);
    if (h.ok()) continue;
    absl::MutexLock l(&completion_mu_);
    if (auto w = wholes_.find(s.whole); w != wholes_.end()) --w->second->in_flight;
    PartDone(s.whole, h.status());
  }
  *sent = !sends.empty();
  return active;
}

void ClientImpl::PumpParts() {
  for (;;) {
    {
      absl::MutexLock l(&completion_mu_);
      completion_mu_.Await(absl::Condition(this, &ClientImpl::PumpHasWork));
      if (pump_stop_) return;
      pump_kick_.store(false, std::memory_order_relaxed);
    }
    bool sent = false;
    if (!AdvanceParts(&sent) || sent) continue;
    SleepOnDoorbell(
        &header_->completion_ready,
        [this] {
          return completion_ring_.HasData() || Dead() || pump_kick_.load(std::memory_order_acquire);
        },
        kMaxSleep, options_.spin);
  }
}

}  // namespace kolo
