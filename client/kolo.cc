// libkolo's C++ API over ClientImpl.
#include "kolo/kolo.h"

#include <cstdlib>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/client_impl.h"
#include "client/job_env.h"
#include "client/job_token.h"
#include "client/kolod_locator.h"
#include "client/launcher_env.h"
#include "client/private_kolod.h"
#include "common/random_id.h"

namespace kolo {
namespace {

absl::Status EnvInt(const char* name, int* out) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return absl::OkStatus();
  if (!absl::SimpleAtoi(v, out)) {
    return absl::InvalidArgumentError(absl::StrCat(name, "=\"", v, "\" is not an integer"));
  }
  return absl::OkStatus();
}

uint64_t ElementsOf(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d < 0 ? 0 : d);
  return n;
}

}  // namespace

absl::StatusOr<ClientOptions> ClientOptions::FromEnv() {
  ClientOptions o;
  if (const char* v = std::getenv("KOLO_SOCKET"); v != nullptr && *v) {
    o.socket_path = v;
  }
  if (const char* v = std::getenv("KOLO_JOB_TOKEN"); v != nullptr) o.job_token = v;
  for (auto [name, field] :
       {std::pair{"KOLO_RANK", &o.rank}, std::pair{"KOLO_SIZE", &o.size},
        std::pair{"KOLO_LOCAL_RANK", &o.local_rank}, std::pair{"KOLO_LOCAL_SIZE", &o.local_size}}) {
    if (absl::Status s = EnvInt(name, field); !s.ok()) return s;
  }
  absl::StatusOr<Launcher> launcher = ApplyLauncherEnvironment(&o);
  if (!launcher.ok()) return launcher.status();
  // Without local values, a job is one node.
  if (*launcher == Launcher::kNone) {
    if (std::getenv("KOLO_LOCAL_SIZE") == nullptr) o.local_size = o.size;
    if (std::getenv("KOLO_LOCAL_RANK") == nullptr) o.local_rank = o.rank;
  }
  // Kolo's own variables win over the launcher's.
  if (const char* v = std::getenv("KOLO_JOB_ID"); v != nullptr && *v) o.job_id = v;
  if (const char* v = std::getenv("KOLO_COORDINATOR"); v != nullptr && *v) {
    o.coordinator = v;
  }
  if (o.size < 1 || o.rank < 0 || o.rank >= o.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("KOLO_RANK=", o.rank, " must lie in [0, KOLO_SIZE=", o.size, ")"));
  }
  // A torchrun job on one node with no kolod on the node's socket (and no
  // KOLO_SOCKET naming one) gets a private kolod (client/private_kolod.h).
  if (*launcher == Launcher::kTorchrun && o.size == o.local_size &&
      std::getenv("KOLO_SOCKET") == nullptr && !SocketAccepts(o.socket_path)) {
    absl::StatusOr<std::string> socket =
        UsePrivateKolod({.job_id = o.job_id, .local_rank = o.local_rank});
    if (!socket.ok()) return socket.status();
    o.socket_path = *socket;
  }
  for (auto [name, field] : {std::pair{"KOLO_ELASTIC", &o.elastic.enabled},
                             std::pair{"KOLO_ELASTIC_JOINER", &o.elastic.joiner}}) {
    if (const char* v = std::getenv(name); v != nullptr && *v) {
      if (std::string_view(v) != "0" && std::string_view(v) != "1") {
        return absl::InvalidArgumentError(absl::StrCat(name, "=\"", v, "\": want 0 or 1"));
      }
      *field = std::string_view(v) == "1";
    }
  }
  if (o.elastic.enabled) {
    o.elastic.min_size = o.size;
    for (auto [name, field] : {std::pair{"KOLO_ELASTIC_MIN_SIZE", &o.elastic.min_size},
                               std::pair{"KOLO_ELASTIC_MAX_SIZE", &o.elastic.max_size}}) {
      if (absl::Status s = EnvInt(name, field); !s.ok()) return s;
    }
    if (o.elastic.min_size < 1 || o.elastic.max_size < 0 ||
        (o.elastic.max_size > 0 && o.elastic.max_size < o.elastic.min_size)) {
      return absl::InvalidArgumentError(
          absl::StrCat("KOLO_ELASTIC_MIN_SIZE=", o.elastic.min_size, " and KOLO_ELASTIC_MAX_SIZE=",
                       o.elastic.max_size, " want 1 <= min <= max (max 0: no bound)"));
    }
  }
  if (std::getenv("KOLO_JOB_TOKEN") == nullptr) {
    // See client/job_token.h.
    if (o.size == 1) {
      o.job_token = RandomHex(16);
    } else {
      const std::string file = DefaultJobTokenFile();
      if (file.empty()) {
        return absl::FailedPreconditionError(
            "no job token: set KOLO_JOB_TOKEN (the same random value, at least 32 characters, "
            "for every rank), KOLO_JOB_TOKEN_FILE, or HOME for ~/.kolo/job_token");
      }
      auto token = LoadOrCreateJobToken(file);
      if (!token.ok()) return token.status();
      o.job_token = *token;
    }
  }
  if (const char* v = std::getenv("KOLO_ARENA_BYTES"); v != nullptr && *v) {
    uint64_t bytes = 0;
    if (!absl::SimpleAtoi(v, &bytes) || bytes == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("KOLO_ARENA_BYTES=\"", v, "\" is not a positive byte count"));
    }
    o.arena_bytes = bytes;
  }
  if (const char* v = std::getenv("KOLO_RESULT_BYTES"); v != nullptr && *v) {
    uint64_t bytes = 0;
    if (!absl::SimpleAtoi(v, &bytes) || bytes == 0 || bytes >= o.arena_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "KOLO_RESULT_BYTES=\"", v, "\" must be a byte count below the arena's ", o.arena_bytes));
    }
    o.result_bytes = bytes;
  }
  if (const char* v = std::getenv("KOLO_CALLER_MEMORY"); v != nullptr && *v) {
    if (std::string_view(v) != "0" && std::string_view(v) != "1") {
      return absl::InvalidArgumentError(
          absl::StrCat("KOLO_CALLER_MEMORY=\"", v, "\": want 0 or 1"));
    }
    o.caller_memory = std::string_view(v) == "1";
  }
  if (const char* v = std::getenv("KOLO_CALLER_MEMORY_MIN_BYTES"); v != nullptr && *v) {
    uint64_t bytes = 0;
    if (!absl::SimpleAtoi(v, &bytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat("KOLO_CALLER_MEMORY_MIN_BYTES=\"", v, "\": want a byte count"));
    }
    o.caller_memory_min_bytes = bytes;
  }
  if (const char* v = std::getenv("KOLO_SPIN_US"); v != nullptr && *v) {
    int us = 0;
    if (!absl::SimpleAtoi(v, &us) || us < 0 || us > 100000) {
      return absl::InvalidArgumentError(absl::StrCat("KOLO_SPIN_US=\"", v, "\": want 0..100000"));
    }
    o.spin = absl::Microseconds(us);
  }
  if (absl::Status s = ApplyJobEnvironment(&o); !s.ok()) return s;
  return o;
}

int64_t TensorView::num_elements() const { return static_cast<int64_t>(ElementsOf(shape)); }
uint64_t TensorView::byte_size() const { return ElementsOf(shape) * DTypeSize(dtype); }
int64_t ConstTensorView::num_elements() const { return static_cast<int64_t>(ElementsOf(shape)); }
uint64_t ConstTensorView::byte_size() const { return ElementsOf(shape) * DTypeSize(dtype); }

HostBuffer::HostBuffer(HostBuffer&& o) noexcept
    : arena_(std::move(o.arena_)),
      data_(std::exchange(o.data_, nullptr)),
      bytes_(std::exchange(o.bytes_, 0)),
      dtype_(o.dtype_),
      shape_(std::move(o.shape_)),
      result_offset_(std::exchange(o.result_offset_, -1)) {}

HostBuffer& HostBuffer::operator=(HostBuffer&& o) noexcept {
  if (this != &o) {
    Release();
    arena_ = std::move(o.arena_);
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    dtype_ = o.dtype_;
    shape_ = std::move(o.shape_);
    result_offset_ = std::exchange(o.result_offset_, -1);
  }
  return *this;
}

HostBuffer::~HostBuffer() { Release(); }

void HostBuffer::Release() {
  if (arena_ != nullptr && result_offset_ >= 0) {
    arena_->ReleaseResult(static_cast<uint64_t>(result_offset_));
  } else if (arena_ != nullptr && data_ != nullptr) {
    absl::MutexLock l(&arena_->mu);
    arena_->alloc.Free(static_cast<uint8_t*>(data_) - arena_->base);
  }
  arena_.reset();
  data_ = nullptr;
  result_offset_ = -1;
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  auto impl = ClientImpl::Connect(options);
  if (!impl.ok()) return impl.status();
  return std::unique_ptr<Client>(new Client(std::move(*impl)));
}

Client::Client(std::unique_ptr<ClientImpl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

int Client::rank() const { return impl_->options().rank; }
int Client::size() const { return impl_->options().size; }
int Client::local_rank() const { return impl_->options().local_rank; }
int Client::local_size() const { return impl_->options().local_size; }
const std::string& Client::session_id() const { return impl_->session_id(); }
uint64_t Client::epoch() const { return impl_->epoch(); }

absl::StatusOr<Client::ElasticStatus> Client::GetElasticStatus() const {
  return impl_->GetElasticStatus();
}

absl::StatusOr<std::unique_ptr<Client>> Client::Reset() {
  ClientOptions options = impl_->options();
  if (!options.elastic.enabled) {
    return absl::FailedPreconditionError(
        "Client::Reset: the job is not elastic (KOLO_ELASTIC=1, or kolorun --min-np)");
  }
  options.elastic.previous_rank = rank();
  options.elastic.previous_epoch = epoch();
  options.elastic.joiner = false;
  impl_->Close(/*rejoin=*/true);
  return Connect(options);
}

absl::StatusOr<HostBuffer> Client::Allocate(DType dtype, std::vector<int64_t> shape) {
  return impl_->Allocate(dtype, std::move(shape));
}

absl::StatusOr<Handle> Client::AllreduceAsync(const ConstTensorView& input,
                                              const TensorView& output, std::string_view name,
                                              const AllreduceOptions& options) {
  SubmitSpec spec{CollectiveKind::kAllreduce, input, output, name};
  spec.reduce = options;
  spec.process_set = options.process_set;
  return impl_->Submit(spec);
}

absl::Status Client::Allreduce(const ConstTensorView& input, const TensorView& output,
                               std::string_view name, const AllreduceOptions& options) {
  auto h = AllreduceAsync(input, output, name, options);
  if (!h.ok()) return h.status();
  return Wait(*h);
}

absl::StatusOr<Handle> Client::BroadcastAsync(const TensorView& tensor, std::string_view name,
                                              int root_rank, const CollectiveOptions& options) {
  SubmitSpec spec{CollectiveKind::kBroadcast, tensor, tensor, name};
  spec.root_rank = root_rank;
  spec.process_set = options.process_set;
  spec.reduce.cuda_stream = options.cuda_stream;
  return impl_->Submit(spec);  // (which refuses a root outside the job)
}

absl::Status Client::Broadcast(const TensorView& tensor, std::string_view name, int root_rank,
                               const CollectiveOptions& options) {
  auto h = BroadcastAsync(tensor, name, root_rank, options);
  if (!h.ok()) return h.status();
  return Wait(*h);
}

absl::StatusOr<Handle> Client::AllgatherAsync(const ConstTensorView& input, std::string_view name,
                                              const CollectiveOptions& options) {
  SubmitSpec spec{CollectiveKind::kAllgather, input, {}, name};
  spec.process_set = options.process_set;
  return impl_->Submit(spec);
}

absl::StatusOr<HostBuffer> Client::Allgather(const ConstTensorView& input, std::string_view name,
                                             const CollectiveOptions& options) {
  auto h = AllgatherAsync(input, name, options);
  if (!h.ok()) return h.status();
  return WaitForOutput(*h);
}

absl::StatusOr<Handle> Client::AllgatherAsync(const ConstTensorView& input,
                                              const TensorView& output, std::string_view name,
                                              const CollectiveOptions& options) {
  SubmitSpec spec{CollectiveKind::kAllgather, input, output, name};
  spec.process_set = options.process_set;
  spec.reduce.cuda_stream = options.cuda_stream;
  return impl_->Submit(spec);
}

absl::StatusOr<Handle> Client::ReducescatterAsync(const ConstTensorView& input,
                                                  const TensorView& output, std::string_view name,
                                                  const AllreduceOptions& options) {
  SubmitSpec spec{CollectiveKind::kReducescatter, input, output, name};
  spec.reduce = options;
  spec.process_set = options.process_set;
  return impl_->Submit(spec);
}

absl::StatusOr<Handle> Client::ReducescatterAsync(const ConstTensorView& input,
                                                  std::string_view name,
                                                  const AllreduceOptions& options) {
  SubmitSpec spec{CollectiveKind::kReducescatter, input, {}, name};
  spec.reduce = options;
  spec.process_set = options.process_set;
  return impl_->Submit(spec);
}

absl::StatusOr<HostBuffer> Client::Reducescatter(const ConstTensorView& input,
                                                 std::string_view name,
                                                 const AllreduceOptions& options) {
  auto h = ReducescatterAsync(input, name, options);
  if (!h.ok()) return h.status();
  return WaitForOutput(*h);
}

absl::StatusOr<Handle> Client::AlltoallAsync(const ConstTensorView& input,
                                             std::vector<int64_t> splits, std::string_view name,
                                             const CollectiveOptions& options) {
  SubmitSpec spec{CollectiveKind::kAlltoall, input, {}, name};
  spec.process_set = options.process_set;
  spec.aux = std::move(splits);
  return impl_->Submit(spec);
}

absl::StatusOr<AlltoallResult> Client::Alltoall(const ConstTensorView& input,
                                                std::vector<int64_t> splits, std::string_view name,
                                                const CollectiveOptions& options) {
  auto h = AlltoallAsync(input, std::move(splits), name, options);
  if (!h.ok()) return h.status();
  return WaitForAlltoall(*h);
}

absl::Status Client::Refuse(CollectiveKind kind, std::string_view name, int process_set,
                            const absl::Status& why) {
  if (why.ok()) return why;
  SubmitSpec spec{kind, {}, {}, name};
  spec.process_set = process_set;
  spec.refused = why;
  return impl_->Submit(spec).status();
}

absl::Status Client::Barrier(const CollectiveOptions& options) {
  return impl_->Barrier(options.process_set);
}

absl::StatusOr<int> Client::Join() { return impl_->Join(); }

absl::Status Client::StartTimeline(uint64_t max_events) { return impl_->StartTimeline(max_events); }

absl::StatusOr<TimelineTrace> Client::StopTimeline() { return impl_->StopTimeline(); }

absl::StatusOr<std::vector<Handle>> Client::GroupedAllreduceAsync(
    const std::vector<ConstTensorView>& inputs, const std::vector<TensorView>& outputs,
    const std::vector<std::string>& names, const AllreduceOptions& options) {
  if (inputs.size() != outputs.size() || inputs.size() != names.size()) {
    return absl::InvalidArgumentError(
        "grouped allreduce: inputs, outputs and names differ in length");
  }
  std::vector<SubmitSpec> specs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    SubmitSpec spec{CollectiveKind::kAllreduce, inputs[i], outputs[i], names[i]};
    spec.reduce = options;
    spec.process_set = options.process_set;
    specs.push_back(std::move(spec));
  }
  return impl_->SubmitGroup(std::move(specs));
}

absl::StatusOr<std::vector<Handle>> Client::GroupedAllgatherAsync(
    const std::vector<ConstTensorView>& inputs, const std::vector<std::string>& names,
    const CollectiveOptions& options) {
  if (inputs.size() != names.size()) {
    return absl::InvalidArgumentError("grouped allgather: inputs and names differ in length");
  }
  std::vector<SubmitSpec> specs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    SubmitSpec spec{CollectiveKind::kAllgather, inputs[i], {}, names[i]};
    spec.process_set = options.process_set;
    specs.push_back(std::move(spec));
  }
  return impl_->SubmitGroup(std::move(specs));
}

absl::StatusOr<std::vector<Handle>> Client::GroupedReducescatterAsync(
    const std::vector<ConstTensorView>& inputs, const std::vector<std::string>& names,
    const AllreduceOptions& options) {
  if (inputs.size() != names.size()) {
    return absl::InvalidArgumentError("grouped reducescatter: inputs and names differ in length");
  }
  std::vector<SubmitSpec> specs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    SubmitSpec spec{CollectiveKind::kReducescatter, inputs[i], {}, names[i]};
    spec.reduce = options;
    spec.process_set = options.process_set;
    specs.push_back(std::move(spec));
  }
  return impl_->SubmitGroup(std::move(specs));
}

absl::StatusOr<int> Client::AddProcessSet(std::vector<int> ranks) {
  return impl_->AddProcessSet(std::move(ranks));
}

absl::Status Client::RemoveProcessSet(int process_set) {
  return impl_->RemoveProcessSet(process_set);
}

absl::StatusOr<int> Client::ProcessSetRank(int process_set) const {
  return impl_->ProcessSetRank(process_set);
}

absl::StatusOr<int> Client::ProcessSetSize(int process_set) const {
  return impl_->ProcessSetSize(process_set);
}

absl::Status Client::Wait(Handle handle) {
  return impl_->WaitFor(handle, absl::InfiniteDuration());
}

absl::Status Client::WaitFor(Handle handle, absl::Duration timeout) {
  return impl_->WaitFor(handle, timeout);
}

absl::StatusOr<HostBuffer> Client::WaitForOutput(Handle handle) {
  return impl_->WaitForOutput(handle);
}

absl::StatusOr<AlltoallResult> Client::WaitForAlltoall(Handle handle) {
  return impl_->WaitForAlltoall(handle);
}

bool Client::caller_memory() const { return impl_->caller_memory(); }

absl::StatusOr<bool> Client::Test(Handle handle) {
  return impl_->Test(handle, absl::ZeroDuration());
}

absl::StatusOr<bool> Client::TestFor(Handle handle, absl::Duration timeout) {
  return impl_->Test(handle, timeout);
}

absl::StatusOr<bool> Client::Underway(Handle handle) { return impl_->Underway(handle); }

}  // namespace kolo
