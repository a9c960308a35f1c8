// What the NcclBackend's files share: the layout rules of a fused region and
// a lane (one GPU's stream, events, fusion buffer and the copies of the
// response being executed). Internal to nccl_backend.cc and
// nccl_backend_gather.cc.
//
// Thread-safety: a Lane is used by the thread executing a response (under
// NcclBackend::mu_).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/cuda/cuda_resources.h"
#include "common/cuda/cuda_status.h"
#include "daemon/backend/nccl/nccl_backend.h"
#include "kernels/cuda/batched_copy.h"
#include "proto/kolo/abi/collective_traits.h"

namespace kolo::daemon::nccl {

using kernels::cuda::CopySegment;

namespace layout {

constexpr uint64_t kRegionAlign = 256;
constexpr uint64_t kMemberAlign = 16;

inline uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

inline std::vector<cudaEvent_t> Distinct(std::vector<cudaEvent_t> events) {
  std::sort(events.begin(), events.end());
  events.erase(std::unique(events.begin(), events.end()), events.end());
  return events;
}

inline std::string Describe(const Response& r) {
  std::string first = r.members.empty() ? std::string() : r.members.front().set.name;
  return absl::StrCat(CollectiveKindName(r.kind), " of ", r.members.size(), " tensor(s) (",
                      r.total_bytes, " bytes of ", DTypeName(r.dtype), ", first \"", first, "\")");
}

}  // namespace layout

struct NcclBackend::Lane {
  Lane(DeviceLane place, cuda::CudaDevice device, cuda::CudaStream stream, cuda::CudaEvent done)
      : place(std::move(place)),
        device(std::move(device)),
        stream(std::move(stream)),
        done(std::move(done)) {}
  // Buffers, stream and event belong to this lane's GPU: free them there.
  ~Lane() { (void)device.MakeCurrent(); }

  const DeviceLane place;
  const cuda::CudaDevice device;
  cuda::CudaStream stream;
  cuda::CudaEvent done;
  cuda::DeviceBuffer fusion;
  cuda::DeviceBuffer descriptors;
  cuda::PinnedBuffer staging;
  // What the response being executed moves on this lane.
  std::vector<CopySegment> pack;
  std::vector<CopySegment> unpack;
  uint64_t unpack_chunks = 0;
  std::vector<std::pair<uint8_t*, uint64_t>> zero;  // regions of failed members
  std::vector<cudaEvent_t> wait_events;
  std::vector<cudaEvent_t> record_events;

  uint8_t* region(size_t i, uint64_t region_bytes) const {
    return fusion.data() + i * region_bytes;
  }

  // After the response's work on `s`: each client's output event, then the
  // lane's completion event.
  absl::Status RecordOutputs(cudaStream_t s) {
    for (cudaEvent_t e : record_events) {
      KOLO_RETURN_IF_CUDA_ERROR(cudaEventRecord(e, s), "recording an output event");
    }
    return done.Record(s);
  }

  // Before a response: a fusion buffer of at least `bytes` on this lane's
  // GPU and no work from the last one.
  absl::Status Reset(uint64_t bytes) {
    if (absl::Status s = device.MakeCurrent(); !s.ok()) return s;
    if (absl::Status s = fusion.Reserve(bytes); !s.ok()) return s;
    pack.clear();
    unpack.clear();
    zero.clear();
    wait_events.clear();
    record_events.clear();
    return absl::OkStatus();
  }
};

}  // namespace kolo::daemon::nccl
