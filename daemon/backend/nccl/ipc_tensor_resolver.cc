#include "daemon/backend/nccl/ipc_tensor_resolver.h"

#include "absl/strings/str_cat.h"
#include "proto/kolo/abi/collective_traits.h"

namespace kolo::daemon::nccl {
namespace {

// A mapping unused this long closes (a training loop uses its buffers every
// step; one used again later is reopened, at the cost of a driver call).
constexpr absl::Duration kIdleMapping = absl::Seconds(60);
constexpr absl::Duration kSweepEvery = absl::Seconds(10);

absl::Status Annotate(const absl::Status& s, const Request& r, const char* which) {
  return absl::Status(s.code(), absl::StrCat(CollectiveKindName(r.kind), " \"", r.name, "\": rank ",
                                             r.rank, " ", which, ": ", s.message()));
}

}  // namespace

std::shared_ptr<cuda::IpcMappingCache> IpcTensorResolver::CacheFor(const std::string& session_id) {
  absl::MutexLock lock(&mu_);
  std::shared_ptr<cuda::IpcMappingCache>& cache = caches_[session_id];
  if (cache == nullptr) cache = std::make_shared<cuda::IpcMappingCache>(max_entries_);
  return cache;
}

absl::StatusOr<ResolvedIo> IpcTensorResolver::Resolve(const Request& request) {
  const cuda::DeviceIo* io = device_io_of_(request);
  if (io == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(CollectiveKindName(request.kind), " \"",
                                                   request.name, "\": rank ", request.rank,
                                                   " sent no device tensor"));
  }
  const std::string session_id =
      request.origin != nullptr ? request.origin->origin_id() : std::string();
  std::shared_ptr<cuda::IpcMappingCache> cache = CacheFor(session_id);
  const size_t esize = DTypeSize(request.dtype);
  ResolvedIo out;
  out.holds.push_back(cache);
  struct Side {
    const cuda::DeviceTensorRef* ref;
    ResolvedTensor* into;
    const char* name;
  };
  for (const Side& side :
       {Side{&io->input, &out.input, "input"}, Side{&io->output, &out.output, "output"}}) {
    const bool sized_by_request = side.into == &out.input || Traits(request.kind).in_place;
    if (sized_by_request && side.ref->bytes != request.bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(CollectiveKindName(request.kind), " \"", request.name, "\": rank ",
                       request.rank, " ", side.name, " device tensor has ", side.ref->bytes,
                       " bytes, the request ", request.bytes));
    }
    auto mapping = cache->Memory(side.ref->memory);
    if (!mapping.ok()) return Annotate(mapping.status(), request, side.name);
    auto data = (*mapping)->Resolve(side.ref->offset, side.ref->bytes, esize);
    if (!data.ok()) return Annotate(data.status(), request, side.name);
    auto event = cache->Event(side.ref->event);
    if (!event.ok()) return Annotate(event.status(), request, side.name);
    side.into->data = *data;
    side.into->bytes = side.ref->bytes;
    side.into->event = (*event)->get();
    out.holds.push_back(*mapping);
    out.holds.push_back(*event);
  }
  // A rank does not say when it frees device memory, and an open mapping
  // keeps that memory allocated: close what its collectives stopped using.
  cache->SweepIdle(absl::Now(), kIdleMapping, kSweepEvery);
  return out;
}

void IpcTensorResolver::ReleaseSession(const std::string& session_id) {
  std::shared_ptr<cuda::IpcMappingCache> cache;
  {
    absl::MutexLock lock(&mu_);
    auto it = caches_.find(session_id);
    if (it == caches_.end()) return;
    cache = std::move(it->second);
    caches_.erase(it);
  }
  cache->Clear();
}

size_t IpcTensorResolver::sessions() const {
  absl::MutexLock lock(&mu_);
  return caches_.size();
}

}  // namespace kolo::daemon::nccl
