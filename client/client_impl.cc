#include "client/client_impl.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/futex.h"
#include "common/grpc_status.h"
#include "common/handoff.h"
#include "common/random_id.h"
#include "common/process_set_rule.h"
#include "common/start_thread.h"
#include "common/status_macros.h"
#include "proto/kolo/abi/collective_traits.h"

namespace kolo {
namespace {

using abi::v1::CompletionSlot;
using abi::v1::SegmentHeader;
using abi::v1::SubmitSlot;

constexpr uint32_t kSubmitCapacity = 1024;
constexpr uint32_t kCompletionCapacity = 4096;
// A stop renders and sends up to a few hundred megabytes of trace.
constexpr absl::Duration kTimelineCallTimeout = absl::Seconds(120);

}  // namespace

ClientImpl::ClientImpl(const ClientOptions& options) : options_(options) {}

absl::StatusOr<std::unique_ptr<ClientImpl>> ClientImpl::Connect(const ClientOptions& options) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", options.rank, " outside a job of size ", options.size));
  }
  std::unique_ptr<ClientImpl> c(new ClientImpl(options));
  abi::v1::Layout layout =
      abi::v1::ComputeLayout(kSubmitCapacity, kCompletionCapacity, options.arena_bytes);
  auto segment = SharedSegment::Create(layout.total_bytes);
  if (!segment.ok()) return segment.status();
  c->segment_ = std::make_shared<SharedSegment>(*std::move(segment));
  uint8_t* base = c->segment_->data();
  uint64_t result_bytes =
      options.result_bytes != 0 ? options.result_bytes : abi::v1::AlignUp(options.arena_bytes) / 4;
  SegmentHeader* h = abi::v1::InitSegmentHeader(base, kSubmitCapacity, kCompletionCapacity,
                                                options.arena_bytes, result_bytes);
  c->header_ = h;
  c->completion_capacity_ = kCompletionCapacity;
  c->arena_ = std::make_shared<HostBuffer::Arena>(c->segment_, base + layout.arena_offset,
                                                  h->arena_bytes, h->arena_bytes - result_bytes);
  {
    ClientImpl* self = c.get();
    absl::MutexLock l(&c->arena_->mu);
    c->arena_->release_result = [self](uint64_t offset) { self->ReleaseResult(offset); };
  }
  {
    absl::MutexLock l(&c->submit_mu_);
    c->submit_ring_ = SpscRing<SubmitSlot>(
        &h->submit_tail, &h->submit_head,
        reinterpret_cast<SubmitSlot*>(base + layout.submit_offset), kSubmitCapacity);
  }
  c->completion_ring_ = SpscRing<CompletionSlot>(
      &h->completion_tail, &h->completion_head,
      reinterpret_cast<CompletionSlot*>(base + layout.completion_offset), kCompletionCapacity);
  if (absl::Status s = c->Attach(); !s.ok()) return s;
  {
    // After the attach: an elastic job's size is kolod's to say.
    absl::MutexLock l(&c->counters_mu_);
    std::vector<int> all(c->options_.size);
    for (int r = 0; r < c->options_.size; ++r) all[r] = r;
    c->process_sets_[kGlobalProcessSet] = std::move(all);
  }
  return c;
}

absl::Status ClientImpl::Attach() {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
  // A stopped timeline comes back as one message of any size.
  args.SetMaxReceiveMessageSize(-1);
  channel_ = grpc::CreateCustomChannel("unix:" + options_.socket_path,
                                       grpc::InsecureChannelCredentials(), args);
  if (!channel_->WaitForConnected(std::chrono::system_clock::now() +
                                  absl::ToChronoNanoseconds(options_.connect_timeout))) {
    return absl::UnavailableError(
        absl::StrCat("no kolod is answering on ", options_.socket_path,
                     " (start kolod --socket PATH, set KOLO_SOCKET, or run under kolorun)"));
  }
  // kolod learns who this process is, and receives its segment, from the
  // kernel over the handoff socket; the attach presents the ticket.
  auto ticket =
      HandOff(HandoffSocketPath(options_.socket_path), segment_->fd(), options_.connect_timeout);
  if (!ticket.ok()) {
    return absl::Status(ticket.status().code(),
                        absl::StrCat("attach to kolod at ", options_.socket_path, " as rank ",
                                     options_.rank, ": ", ticket.status().message()));
  }
  attach_context_.AddMetadata(kHandoffMetadata, *ticket);
  stub_ = kolo::v1::Node::NewStub(channel_);
  stream_ = stub_->Attach(&attach_context_);
  kolo::v1::ClientMessage hello;
  auto* a = hello.mutable_attach();
  a->set_job_id(options_.job_id);
  a->set_job_token(options_.job_token);
  a->set_rank(options_.rank);
  a->set_size(options_.size);
  a->set_local_rank(options_.local_rank);
  a->set_local_size(options_.local_size);
  a->set_coordinator(options_.coordinator);
  a->set_shm_bytes(segment_->size());
  a->set_shm_abi_version(abi::v1::kVersion);
  if (options_.caller_memory && options_.local_size == options_.size &&
      options_.coordinator.empty()) {
    // kolod proves it can reach this process's memory by reading these
    // random bytes where they are.
    const std::string probe = RandomHex(static_cast<int>(caller_memory_probe_.size() / 2));
    std::memcpy(caller_memory_probe_.data(), probe.data(), caller_memory_probe_.size());
    a->set_caller_memory_probe_address(reinterpret_cast<uint64_t>(caller_memory_probe_.data()));
    a->set_caller_memory_probe(std::string(
        reinterpret_cast<const char*>(caller_memory_probe_.data()), caller_memory_probe_.size()));
  }
  if (options_.elastic.enabled) {
    auto* e = a->mutable_elastic();
    e->set_enabled(true);
    e->set_min_size(options_.elastic.min_size);
    e->set_max_size(options_.elastic.max_size);
    e->set_joiner(options_.elastic.joiner);
    e->set_previous_rank(options_.elastic.previous_rank);
    e->set_previous_epoch(options_.elastic.previous_epoch);
  }
  kolo::v1::DaemonMessage reply;
  if (!stream_->Write(hello) || !stream_->Read(&reply) || !reply.has_attached()) {
    grpc::Status s = stream_->Finish();
    absl::Status err = FromGrpcStatus(s);
    if (err.ok()) err = absl::UnavailableError("kolod ended the attach");
    return absl::Status(err.code(), absl::StrCat("attach to kolod at ", options_.socket_path,
                                                 " as rank ", options_.rank, ": ", err.message()));
  }
  session_id_ = reply.attached().session_id();
  caller_memory_ = reply.attached().caller_memory();
  tensor_parts_ = reply.attached().tensor_parts();
  if (options_.elastic.enabled) {
    // kolod numbered this rank when the epoch formed.
    const kolo::v1::AttachResponse& r = reply.attached();
    if (r.size() < 1 || r.rank() < 0 || r.rank() >= r.size() || r.local_size() < 1 ||
        r.local_rank() < 0 || r.local_rank() >= r.local_size() || r.epoch() == 0) {
      return absl::InternalError(absl::StrCat("kolod assigned rank ", r.rank(), " of ", r.size(),
                                              " in epoch ", r.epoch(), ": not a seat"));
    }
    options_.rank = r.rank();
    options_.size = r.size();
    options_.local_rank = r.local_rank();
    options_.local_size = r.local_size();
    epoch_ = r.epoch();
  }
  // A thread the system refuses fails the attach, as any other error does
  // (the caller's Close then ends the session).
  absl::StatusOr<std::thread> watcher =
      StartThread("the session's stream watcher", "kolo-watch", [this] { WatchStream(); });
  if (!watcher.ok()) return watcher.status();
  watcher_ = std::move(*watcher);
  return absl::OkStatus();
}

void ClientImpl::WatchStream() {
  kolo::v1::DaemonMessage msg;
  absl::Status event;
  while (stream_->Read(&msg)) {
    if (msg.has_event() && event.ok()) {
      event =
          absl::Status(static_cast<absl::StatusCode>(msg.event().code()), msg.event().message());
    }
  }
  grpc::Status end = stream_->Finish();
  absl::Status why = event;
  if (why.ok()) {
    why = absl::UnavailableError(
        absl::StrCat("lost kolod at ", options_.socket_path, ": ",
                     end.ok() ? "it ended the session" : end.error_message()));
  }
  {
    absl::MutexLock l(&dead_mu_);
    dead_status_ = why;
  }
  dead_.store(true, std::memory_order_release);
  // Wake every waiter of this process; they find the session dead.
  header_->completion_ready.seq.fetch_add(1, std::memory_order_release);
  FutexWakeAll(&header_->completion_ready.seq);
  header_->submit_space.seq.fetch_add(1, std::memory_order_release);
  FutexWakeAll(&header_->submit_space.seq);
}

bool ClientImpl::Dead() const {
  return dead_.load(std::memory_order_acquire) ||
         header_->session_state.load(std::memory_order_acquire) != abi::v1::kSessionOpen;
}

absl::Status ClientImpl::DeadStatus() const {
  if (dead_.load(std::memory_order_acquire)) {
    absl::MutexLock l(&dead_mu_);
    return dead_status_;
  }
  return absl::UnavailableError(
      absl::StrCat("kolod at ", options_.socket_path, " closed the session"));
}

ClientImpl::~ClientImpl() {
  if (arena_ != nullptr) {
    absl::MutexLock l(&arena_->mu);
    arena_->release_result = nullptr;
  }
  Close(/*rejoin=*/false);
}

void ClientImpl::Close(bool rejoin) {
  absl::MutexLock l(&close_mu_);
  if (closed_) return;
  closed_ = true;
  if (stub_ != nullptr && !dead_.load()) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    kolo::v1::DetachRequest req;
    req.set_session_id(session_id_);
    req.set_rejoin(rejoin);
    kolo::v1::DetachResponse resp;
    (void)stub_->Detach(&ctx, req, &resp);
  }
  if (stream_ != nullptr) attach_context_.TryCancel();
  if (watcher_.joinable()) watcher_.join();
  {
    absl::MutexLock cl(&completion_mu_);
    pump_stop_ = true;
  }
  if (pump_.joinable()) pump_.join();
}

absl::StatusOr<Client::ElasticStatus> ClientImpl::GetElasticStatus() const {
  if (Dead()) return DeadStatus();
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  kolo::v1::ElasticStatusRequest req;
  req.set_session_id(session_id_);
  kolo::v1::ElasticStatusResponse resp;
  if (grpc::Status s = stub_->ElasticStatus(&ctx, req, &resp); !s.ok()) return FromGrpcStatus(s);
  Client::ElasticStatus out;
  out.epoch = resp.epoch();
  out.current_epoch = resp.current_epoch();
  out.joiners_waiting = resp.joiners_waiting();
  return out;
}

absl::StatusOr<kolo::v1::JobTimelineResponse> ClientImpl::JobTimeline(
    kolo::v1::JobTimelineRequest::Action action, uint64_t max_events) {
  if (Dead()) return DeadStatus();
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + kTimelineCallTimeout));
  kolo::v1::JobTimelineRequest req;
  req.set_session_id(session_id_);
  req.set_action(action);
  req.set_max_events(max_events);
  kolo::v1::JobTimelineResponse resp;
  if (grpc::Status s = stub_->JobTimeline(&ctx, req, &resp); !s.ok()) return FromGrpcStatus(s);
  return resp;
}

absl::Status ClientImpl::StartTimeline(uint64_t max_events) {
  return JobTimeline(kolo::v1::JobTimelineRequest::START, max_events).status();
}

absl::StatusOr<TimelineTrace> ClientImpl::StopTimeline() {
  auto resp = JobTimeline(kolo::v1::JobTimelineRequest::STOP, 0);
  if (!resp.ok()) return resp.status();
  return TimelineTrace{std::move(*resp->mutable_trace_json()), resp->events(), resp->dropped()};
}

absl::StatusOr<HostBuffer> ClientImpl::Allocate(DType dtype, std::vector<int64_t> shape) {
  if (static_cast<uint32_t>(dtype) >= kNumDTypes) {
    return absl::InvalidArgumentError("unknown dtype");
  }
  uint64_t elements = 1;
  for (int64_t d : shape) {
    if (d < 0) return absl::InvalidArgumentError("negative dimension");
    if (d != 0 && elements > (uint64_t{1} << 62) / static_cast<uint64_t>(d)) {
      return absl::InvalidArgumentError("shape overflows");
    }
    elements *= static_cast<uint64_t>(d);
  }
  uint64_t bytes = elements * DTypeSize(dtype);
  uint64_t offset;
  {
    absl::MutexLock l(&arena_->mu);
    auto o = arena_->alloc.Allocate(bytes);
    if (!o.ok()) return o.status();
    offset = *o;
  }
  return HostBuffer(arena_, arena_->base + offset, bytes, dtype, std::move(shape));
}

void ClientImpl::FreeStaging(const Pending& p) {
  absl::MutexLock l(&arena_->mu);
  if (p.input_staging != UINT64_MAX) arena_->alloc.Free(p.input_staging);
  if (p.output_staging != UINT64_MAX && p.output_staging != p.input_staging) {
    arena_->alloc.Free(p.output_staging);
  }
  if (p.aux_staging != UINT64_MAX) arena_->alloc.Free(p.aux_staging);
}

namespace {

// Kinds whose device form writes a caller-given output sized unlike the
// input (allgather, reducescatter).
bool DeviceOutputKind(CollectiveKind kind) {
  return Traits(kind).device && Traits(kind).returns_result;
}

// Whether `spec`'s tensors are in GPU memory (the output counts for the kinds
// that write a caller-given output on the device).
bool OnDevice(const SubmitSpec& spec) {
  return spec.input.device >= 0 || (Traits(spec.kind).device && spec.output.device >= 0);
}

// Whether kolod takes `name` (1 to kMaxNameBytes bytes, no control
// characters; see daemon/session/slot_validator.cc).
bool NameKolodTakes(std::string_view name) {
  if (name.empty() || name.size() > abi::v1::kMaxNameBytes) return false;
  for (char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) return false;
  }
  return true;
}

// What the client checks before touching the arena (kolod checks it all
// again: this is for clear errors at the caller's line).
absl::Status CheckSpec(const SubmitSpec& spec) {
  const std::string name(spec.name);
  const ConstTensorView& input = spec.input;
  if (name.empty() || name.size() > abi::v1::kMaxNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("collective name must be 1 to ", abi::v1::kMaxNameBytes, " bytes"));
  }
  if (input.shape.size() > abi::v1::kMaxDims) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", name, "\": at most ", abi::v1::kMaxDims, " dimensions"));
  }
  if (Traits(spec.kind).in_place &&
      (input.dtype != spec.output.dtype || input.shape != spec.output.shape)) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", name, "\": input and output differ in dtype or shape"));
  }
  if (Traits(spec.kind).needs_first_dim && input.shape.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(CollectiveKindName(spec.kind), " \"", name,
                                                   "\": needs a tensor of at least one dimension"));
  }
  if (static_cast<uint32_t>(input.dtype) >= kNumDTypes) {
    return absl::InvalidArgumentError("unknown dtype");
  }
  if (Traits(spec.kind).reduces) {
    const AllreduceOptions& o = spec.reduce;
    if (!ReducesWith(input.dtype, o.op)) {
      return absl::InvalidArgumentError(
          absl::StrCat(CollectiveKindName(spec.kind), " \"", name, "\": ", DTypeName(input.dtype),
                       " has no ", ReduceOpName(o.op), " (sum, min, max, product)"));
    }
    if (!Scalable(input.dtype) && (o.prescale != 1.0 || o.postscale != 1.0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          CollectiveKindName(spec.kind), " \"", name, "\": ", DTypeName(input.dtype),
          " takes no scale factor (prescale ", o.prescale, ", postscale ", o.postscale, ")"));
    }
  }
  for (int64_t d : input.shape) {
    if (d < 0) return absl::InvalidArgumentError("negative dimension");
  }
  const bool on_device = OnDevice(spec);
  if (!on_device) {
    if (DeviceOutputKind(spec.kind) && spec.output.data != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          CollectiveKindName(spec.kind), " \"", name,
          "\": the form with an output takes device tensors; host tensors use the form that "
          "returns a HostBuffer"));
    }
    return absl::OkStatus();
  }
  if (!Traits(spec.kind).device) {
    return absl::UnimplementedError(absl::StrCat(CollectiveKindName(spec.kind), " \"", name,
                                                 "\": device tensors are supported for ",
                                                 KindsWith(&CollectiveTraits::device), " so far"));
  }
  if (DeviceOutputKind(spec.kind)) {
    const TensorView& out = spec.output;
    if (out.data == nullptr || out.dtype != input.dtype || out.shape.empty() ||
        !std::equal(out.shape.begin() + 1, out.shape.end(), input.shape.begin() + 1,
                    input.shape.end())) {
      return absl::InvalidArgumentError(absl::StrCat(
          CollectiveKindName(spec.kind), " \"", name,
          "\": a device tensor's output must be given, of the input's dtype and of its shape "
          "but for the first dimension"));
    }
  }
  if (input.device != spec.output.device) {
    return absl::InvalidArgumentError(absl::StrCat("\"", name, "\": input on device ", input.device,
                                                   ", output on device ", spec.output.device,
                                                   " (both must be on one GPU)"));
  }
  return absl::OkStatus();
}

// The submission slot of `spec`, its tensors at the given arena offsets.
SubmitSlot MakeSlot(const SubmitSpec& spec, uint64_t request_id, uint64_t in_off, uint64_t out_off,
                    uint64_t aux_off) {
  const ConstTensorView& input = spec.input;
  SubmitSlot slot{};
  slot.request_id = request_id;
  slot.kind = static_cast<uint32_t>(spec.kind);
  slot.dtype = static_cast<uint32_t>(input.dtype);
  slot.reduce_op = static_cast<uint32_t>(spec.reduce.op);
  slot.root_rank = spec.root_rank;
  slot.prescale = spec.reduce.prescale;
  slot.postscale = spec.reduce.postscale;
  slot.compression = static_cast<uint32_t>(spec.reduce.compression);
  slot.input_offset = in_off;
  slot.output_offset = out_off;
  slot.byte_length = input.byte_size();
  const std::vector<int64_t>& shape = spec.part_of.has_value() ? *spec.part_of : input.shape;
  slot.ndim = static_cast<uint32_t>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) slot.shape[i] = shape[i];
  if (spec.part_of.has_value()) slot.flags |= abi::v1::kSlotFlagPart;
  slot.name_length = static_cast<uint32_t>(spec.name.size());
  std::memcpy(slot.name, spec.name.data(), spec.name.size());
  slot.process_set = static_cast<uint32_t>(spec.process_set);
  slot.group_id = spec.group_id;
  slot.group_size = spec.group_size;
  slot.aux_offset = aux_off;
  slot.aux_count = spec.aux.size();
  return slot;
}

}  // namespace

// A submission, in order: check the spec; place its tensors in the arena
// (in place when the caller allocated them there, else through staging
// copies); write the slot (device tensors: their IPC handles); wait for room
// among the requests in flight; push the slot and ring kolod's doorbell.
absl::StatusOr<Handle> ClientImpl::Submit(const SubmitSpec& spec) {
  if (Dead()) return DeadStatus();
  if (absl::Status s = CheckSpec(spec); !s.ok()) return Refuse(spec, s);
  if (InParts(spec, OnDevice(spec))) return SubmitInParts(spec);
  return SubmitOne(spec);
}

absl::StatusOr<Handle> ClientImpl::SubmitOne(const SubmitSpec& spec, uint64_t whole,
                                             uint64_t part) {
  const ConstTensorView& input = spec.input;
  const bool on_device = OnDevice(spec);
  Pending p;
  p.kind = spec.kind;
  p.dtype = input.dtype;
  p.process_set = spec.process_set;
  p.bytes = input.byte_size();
  if (!input.shape.empty()) p.row_shape.assign(input.shape.begin() + 1, input.shape.end());
  uint64_t in_off = 0, out_off = 0, aux_off = 0;
  const bool by_address = ByAddress(spec, on_device, p.bytes);
  if (by_address) {
    in_off = reinterpret_cast<uint64_t>(input.data);
    out_off = reinterpret_cast<uint64_t>(spec.output.data);
  } else if (absl::Status s = PlaceInArena(spec, on_device, &p, &in_off, &out_off, &aux_off);
             !s.ok()) {
    return s;
  }
  SubmitSlot slot =
      MakeSlot(spec, next_id_.fetch_add(1, std::memory_order_relaxed), in_off, out_off, aux_off);
  if (by_address) slot.flags |= abi::v1::kSlotFlagCallerMemory;
  if (on_device) {
    auto pending =
        device_io_->Prepare(input.data, p.bytes, spec.output.data, spec.output.byte_size(),
                            input.device, spec.reduce.cuda_stream, &slot);
    if (!pending.ok()) {
      FreeStaging(p);
      // The other ranks learn of it too (a refusal), rather than wait.
      return Refuse(spec, absl::Status(pending.status().code(),
                                       absl::StrCat(CollectiveKindName(spec.kind), " \"",
                                                    std::string(spec.name),
                                                    "\": ", pending.status().message())));
    }
    p.device = std::move(*pending);
  }
  p.whole = whole;
  p.first_part = whole != 0 && part == 0;
  if (absl::Status s = ReserveInFlight(slot.request_id, p); !s.ok()) return s;
  if (absl::Status s = PushSlot(slot, p); !s.ok()) return s;
  RingDoorbell(&header_->submit_ready);
  return Handle{slot.request_id};
}

absl::Status ClientImpl::Refuse(const SubmitSpec& spec, const absl::Status& why) {
  if (!Traits(spec.kind).tensor) return why;
  if (why.ok() || Dead() || !NameKolodTakes(spec.name)) return why;
  const absl::string_view reason =
      why.message().substr(0, std::min<size_t>(why.message().size(), abi::v1::kMaxMessageBytes));
  Pending p;
  p.kind = spec.kind;
  p.process_set = spec.process_set;
  p.refusal = true;
  {
    absl::MutexLock l(&arena_->mu);
    auto o = arena_->alloc.Allocate(std::max<size_t>(reason.size(), 1));
    if (!o.ok()) return why;  // the others then wait for the stall timeout
    p.input_staging = *o;
    if (!reason.empty()) std::memcpy(arena_->base + *o, reason.data(), reason.size());
  }
  SubmitSlot slot{};
  slot.request_id = next_id_.fetch_add(1, std::memory_order_relaxed);
  slot.kind = static_cast<uint32_t>(spec.kind);
  slot.name_length = static_cast<uint32_t>(spec.name.size());
  std::memcpy(slot.name, spec.name.data(), spec.name.size());
  slot.process_set = static_cast<uint32_t>(spec.process_set);
  slot.group_id = spec.group_id;
  slot.group_size = spec.group_size;
  slot.flags = abi::v1::kSlotFlagRefusal;
  slot.input_offset = p.input_staging;
  slot.byte_length = reason.size();
  if (!ReserveInFlight(slot.request_id, p).ok()) return why;
  if (!PushSlot(slot, p).ok()) return why;
  RingDoorbell(&header_->submit_ready);
  return why;
}

bool ClientImpl::ByAddress(const SubmitSpec& spec, bool on_device, uint64_t bytes) const {
  if (!caller_memory_ || on_device || !Traits(spec.kind).in_place ||
      bytes < options_.caller_memory_min_bytes || spec.input.data == nullptr ||
      spec.output.data == nullptr) {
    return false;
  }
  // A tensor in the arena is already where kolod reads it.
  absl::MutexLock l(&arena_->mu);
  return !arena_->Contains(spec.input.data, bytes) && !arena_->Contains(spec.output.data, bytes);
}

absl::Status ClientImpl::PlaceInArena(const SubmitSpec& spec, bool on_device, Pending* p,
                                      uint64_t* in_off, uint64_t* out_off, uint64_t* aux_off) {
  const ConstTensorView& input = spec.input;
  const uint64_t bytes = p->bytes;
  absl::MutexLock l(&arena_->mu);
  if (bytes > 0 && !on_device) {
    if (arena_->Contains(input.data, bytes)) {
      *in_off = static_cast<const uint8_t*>(input.data) - arena_->base;
    } else {
      auto o = arena_->alloc.Allocate(bytes);
      if (!o.ok()) return o.status();
      p->input_staging = *in_off = *o;
      std::memcpy(arena_->base + *in_off, input.data, bytes);
    }
    if (!Traits(spec.kind).in_place) {
      *out_off = *in_off;
    } else if (arena_->Contains(spec.output.data, bytes)) {
      *out_off = static_cast<uint8_t*>(spec.output.data) - arena_->base;
    } else if (p->input_staging != UINT64_MAX) {
      p->output_staging = *out_off = *in_off;
      p->copy_out_to = spec.output.data;
    } else {
      auto o = arena_->alloc.Allocate(bytes);
      if (!o.ok()) return o.status();
      p->output_staging = *out_off = *o;
      p->copy_out_to = spec.output.data;
    }
  }
  if (spec.aux.empty()) return absl::OkStatus();
  auto o = arena_->alloc.Allocate(spec.aux.size() * sizeof(int64_t));
  if (!o.ok()) {
    arena_->mu.Unlock();
    FreeStaging(*p);
    arena_->mu.Lock();
    return o.status();
  }
  p->aux_staging = *aux_off = *o;
  std::memcpy(arena_->base + *aux_off, spec.aux.data(), spec.aux.size() * sizeof(int64_t));
  return absl::OkStatus();
}

absl::Status ClientImpl::ReserveInFlight(uint64_t request_id, const Pending& p) {
  // Keep at most completion_capacity requests between the rings, so kolod
  // always has room for their completions.
  for (;;) {
    {
      absl::MutexLock l(&completion_mu_);
      DrainLocked();
      if (ring_in_flight_ < completion_capacity_) {
        ++ring_in_flight_;
        pending_[request_id] = p;
        return absl::OkStatus();
      }
    }
    if (Dead()) {
      FreeStaging(p);
      return DeadStatus();
    }
    SleepForCompletions(absl::Now() + kMaxSleep);
  }
}

absl::Status ClientImpl::PushSlot(const SubmitSlot& slot, const Pending& p) {
  absl::MutexLock l(&submit_mu_);
  for (;;) {
    RingResult r = submit_ring_.TryPush(slot);
    if (r == RingResult::kOk) return absl::OkStatus();
    if (r == RingResult::kCorrupt || Dead()) {
      absl::MutexLock cl(&completion_mu_);
      pending_.erase(slot.request_id);
      --ring_in_flight_;
      FreeStaging(p);
      return r == RingResult::kCorrupt ? absl::InternalError("submission ring indices corrupted")
                                       : DeadStatus();
    }
    SleepOnDoorbell(
        &header_->submit_space,
        [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return submit_ring_.HasSpace() || Dead(); },
        kMaxSleep, options_.spin);
  }
}

uint64_t ClientImpl::NextCounter(const std::string& key) {
  absl::MutexLock l(&counters_mu_);
  return counters_[key]++;
}

absl::StatusOr<int64_t> ClientImpl::RunControl(CollectiveKind kind, const std::string& name,
                                               int process_set, std::vector<int64_t> aux) {
  SubmitSpec spec{kind, ConstTensorView(nullptr, DType::kUint8, {0}), {}, name};
  spec.process_set = process_set;
  spec.aux = std::move(aux);
  auto h = Submit(spec);
  if (!h.ok()) return h.status();
  auto d = WaitDone(*h, absl::InfiniteDuration());
  if (!d.ok()) return d.status();
  if (!d->status.ok()) return d->status;
  return d->value;
}

absl::Status ClientImpl::Barrier(int process_set) {
  std::string name = absl::StrCat("barrier.", process_set, ".",
                                  NextCounter(absl::StrCat("barrier.", process_set)));
  return RunControl(CollectiveKind::kBarrier, name, process_set, {}).status();
}

absl::StatusOr<int> ClientImpl::Join() {
  std::string name = absl::StrCat("join.", NextCounter("join"));
  auto v = RunControl(CollectiveKind::kJoin, name, kGlobalProcessSet, {});
  if (!v.ok()) return v.status();
  return static_cast<int>(*v);
}

absl::StatusOr<int> ClientImpl::AddProcessSet(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  const std::vector<int64_t> aux(ranks.begin(), ranks.end());
  KOLO_RETURN_IF_ERROR(CheckProcessSetRanks(aux, options_.size));
  std::string name = absl::StrCat("process_set.add.", NextCounter("process_set"));
  auto id = RunControl(CollectiveKind::kAddProcessSet, name, kGlobalProcessSet, aux);
  if (!id.ok()) return id.status();
  absl::MutexLock l(&counters_mu_);
  process_sets_[static_cast<int>(*id)] = std::move(ranks);
  return static_cast<int>(*id);
}

absl::Status ClientImpl::RemoveProcessSet(int process_set) {
  if (process_set == kGlobalProcessSet) {
    return absl::InvalidArgumentError("the global process set cannot be removed");
  }
  std::string name = absl::StrCat("process_set.remove.", NextCounter("process_set"));
  auto done = RunControl(CollectiveKind::kRemoveProcessSet, name, kGlobalProcessSet, {process_set});
  if (!done.ok()) return done.status();
  absl::MutexLock l(&counters_mu_);
  process_sets_.erase(process_set);
  return absl::OkStatus();
}

absl::StatusOr<int> ClientImpl::ProcessSetRank(int process_set) const {
  absl::MutexLock l(&counters_mu_);
  auto it = process_sets_.find(process_set);
  if (it == process_sets_.end()) {
    return absl::NotFoundError(absl::StrCat("no process set ", process_set));
  }
  auto pos = std::lower_bound(it->second.begin(), it->second.end(), options_.rank);
  if (pos == it->second.end() || *pos != options_.rank) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", options_.rank, " is not in process set ", process_set));
  }
  return static_cast<int>(pos - it->second.begin());
}

absl::StatusOr<int> ClientImpl::ProcessSetSize(int process_set) const {
  absl::MutexLock l(&counters_mu_);
  auto it = process_sets_.find(process_set);
  if (it == process_sets_.end()) {
    return absl::NotFoundError(absl::StrCat("no process set ", process_set));
  }
  return static_cast<int>(it->second.size());
}

absl::StatusOr<std::vector<Handle>> ClientImpl::SubmitGroup(std::vector<SubmitSpec> specs) {
  if (specs.empty()) return std::vector<Handle>();
  const int process_set = specs.front().process_set;
  const uint64_t group = NextCounter(absl::StrCat("group.", process_set)) + 1;
  for (SubmitSpec& spec : specs) {
    spec.group_id = group;
    spec.group_size = static_cast<uint32_t>(specs.size());
  }
  // A member this rank refuses fails the whole group, here and on every
  // other rank (each member is refused, so no rank waits for the group).
  for (const SubmitSpec& spec : specs) {
    if (Dead()) return DeadStatus();
    absl::Status s = CheckSpec(spec);
    if (s.ok()) continue;
    const absl::Status why(s.code(),
                           absl::StrCat("grouped ", CollectiveKindName(spec.kind), ": member \"",
                                        std::string(spec.name), "\": ", s.message()));
    for (const SubmitSpec& member : specs) (void)Refuse(member, why);
    return why;
  }
  std::vector<Handle> handles;
  for (SubmitSpec& spec : specs) {
    auto h = Submit(spec);
    if (!h.ok()) {
      // The members already submitted can never run: the group is short.
      return absl::Status(
          h.status().code(),
          absl::StrCat("grouped collective: ", h.status().message(), " (", handles.size(), " of ",
                       specs.size(), " members submitted; the job must be restarted)"));
    }
    handles.push_back(*h);
  }
  return handles;
}

}  // namespace kolo
