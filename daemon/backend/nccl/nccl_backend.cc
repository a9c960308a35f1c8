#include "daemon/backend/nccl/nccl_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/backend/nccl/cuda_status.h"
#include "kernels/cuda/cast.h"
#include "kernels/cuda/reduce.h"

// Returns from the enclosing function if a Kolo kernel launch failed.
#define KOLO_RETURN_IF_LAUNCH_ERROR(launch, what)                                  \
  do {                                                                       \
    if (absl::Status kolo_launch_ = CudaLaunchStatus((launch), (what));      \
        !kolo_launch_.ok()) {                                                \
      return kolo_launch_;                                                   \
    }                                                                        \
  } while (0)

namespace kolo::daemon::nccl {
namespace {

using kernels::cuda::CopySegment;

constexpr uint64_t kRegionAlign = 256;
constexpr uint64_t kMemberAlign = 16;

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

std::vector<cudaEvent_t> Distinct(std::vector<cudaEvent_t> events) {
  std::sort(events.begin(), events.end());
  events.erase(std::unique(events.begin(), events.end()), events.end());
  return events;
}

std::string Describe(const Response& r) {
  std::string first = r.members.empty() ? std::string() : r.members.front().set.name;
  return absl::StrCat(CollectiveKindName(r.kind), " of ", r.members.size(), " tensor(s) (",
                      r.total_bytes, " bytes of ", DTypeName(r.dtype), ", first \"", first,
                      "\")");
}

}  // namespace

absl::StatusOr<std::unique_ptr<NcclBackend>> NcclBackend::Create(
    const NcclBackendOptions& options, DeviceTensorResolver* resolver) {
  absl::StatusOr<CudaDevice> device = CudaDevice::Open(options.device);
  if (!device.ok()) return device.status();
  absl::StatusOr<CudaStream> stream = CudaStream::Create();
  if (!stream.ok()) return stream.status();
  absl::StatusOr<CudaEvent> done = CudaEvent::Create();
  if (!done.ok()) return done.status();
  absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm = NcclCommunicator::Create(
      options.unique_id, options.nranks, options.rank, options.device, options.init_timeout);
  if (!comm.ok()) return comm.status();
  std::unique_ptr<NcclBackend> backend(new NcclBackend(options, resolver, std::move(*device),
                                                       std::move(*stream), std::move(*done),
                                                       std::move(*comm)));
  absl::MutexLock lock(&backend->mu_);
  if (absl::Status s = backend->fusion_.Reserve(options.initial_fusion_bytes); !s.ok()) return s;
  return backend;
}

NcclBackend::NcclBackend(NcclBackendOptions options, DeviceTensorResolver* resolver,
                         CudaDevice device, CudaStream stream, CudaEvent done,
                         std::unique_ptr<NcclCommunicator> comm)
    : options_(std::move(options)),
      resolver_(resolver),
      device_(std::move(device)),
      stream_(std::move(stream)),
      done_(std::move(done)),
      comm_(std::move(comm)) {
  watchdog_ =
      std::make_unique<CollectiveWatchdog>(comm_.get(), &device_, options_.watchdog_interval);
}

NcclBackend::~NcclBackend() {
  watchdog_.reset();  // before the communicator it watches
  (void)device_.MakeCurrent();
  absl::MutexLock lock(&mu_);
  // Let enqueued work finish before its buffers are freed (after an abort
  // the NCCL kernels have exited, so this does not hang on a dead peer).
  cudaStreamSynchronize(stream_.get());
}

absl::Status NcclBackend::Execute(Response& response) {
  absl::MutexLock lock(&mu_);
  if (response.kind != CollectiveKind::kAllreduce) {
    return absl::UnimplementedError(absl::StrCat(
        "the nccl backend does not run ", CollectiveKindName(response.kind), " yet"));
  }
  if (comm_->aborted()) {
    return absl::FailedPreconditionError(absl::StrCat(
        Describe(response), ": the job's NCCL communicator was aborted earlier: ",
        comm_->abort_cause().message()));
  }
  if (absl::Status s = device_.MakeCurrent(); !s.ok()) return s;
  return ExecuteAllreduce(response);
}

absl::Status NcclBackend::ExecuteAllreduce(Response& response) {
  const std::string what = Describe(response);
  const size_t esize = DTypeSize(response.dtype);
  if (esize == 0 || response.total_bytes % esize != 0 || response.members.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": malformed response"));
  }
  const size_t local = response.members.front().set.requests.size();
  if (local == 0 || local > static_cast<size_t>(kernels::cuda::kMaxReduceSources)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", local,
                                                   " local ranks (1 to ",
                                                   kernels::cuda::kMaxReduceSources,
                                                   " supported)"));
  }
  for (const FusedMember& m : response.members) {
    if (m.set.requests.size() != local ||
        m.offset + m.set.requests.front().bytes > response.total_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": member \"", m.set.name, "\" does not fit the response"));
    }
  }
  ReduceOp op = response.op;
  double postscale = response.postscale;
  if (op == ReduceOp::kAverage) {
    op = ReduceOp::kSum;
    postscale /= std::max(1, response.members.front().set.set_size);
  }
  // The backend's own layout of the fused buffer: each member starts on a
  // 16-byte boundary so pack/unpack move whole vectors (the planner's offsets
  // are dense). Every daemon derives the same layout from the same response,
  // so the NCCL step lines up; the padding is reduced along and never read.
  offsets_.clear();
  uint64_t fused_bytes = 0;
  for (const FusedMember& m : response.members) {
    fused_bytes = AlignUp(fused_bytes, kMemberAlign);
    offsets_.push_back(fused_bytes);
    fused_bytes += m.set.requests.front().bytes;
  }
  fused_bytes = AlignUp(fused_bytes, esize);
  const uint64_t count = fused_bytes / esize;
  const uint64_t region = AlignUp(fused_bytes, kRegionAlign);
  const bool compress = response.compression != Compression::kNone &&
                        response.dtype == DType::kFloat32 && comm_->size() > 1;
  const uint64_t fusion_bytes = region * local + (compress ? AlignUp(count * 2, kRegionAlign) : 0);
  if (absl::Status s = fusion_.Reserve(fusion_bytes); !s.ok()) {
    // Every daemon plans the same response; one that cannot hold it must not
    // leave the others waiting.
    comm_->Abort(s);
    return s;
  }

  // Step 1: resolve. A member whose tensors cannot be used fails alone.
  pack_.clear();
  unpack_.clear();
  pack_dst_of_failed_.clear();
  failed_bytes_.clear();
  std::vector<ResolvedIo> holds;
  std::vector<cudaEvent_t> wait_events, record_events;
  for (size_t mi = 0; mi < response.members.size(); ++mi) {
    FusedMember& m = response.members[mi];
    const uint64_t bytes = m.set.requests.front().bytes;
    if (m.set.joined > 0 && op != ReduceOp::kSum && m.status.ok()) {
      m.status = absl::UnimplementedError(absl::StrCat(
          "allreduce \"", m.set.name, "\": ", ReduceOpName(response.op),
          " with joined ranks is not supported for device tensors"));
    }
    std::vector<ResolvedIo> resolved;
    for (const Request& r : m.set.requests) {
      if (!m.status.ok()) break;
      absl::StatusOr<ResolvedIo> io = resolver_->Resolve(r);
      if (!io.ok()) {
        m.status = io.status();
        break;
      }
      resolved.push_back(std::move(*io));
    }
    for (size_t r = 0; r < local; ++r) {
      uint8_t* region_dst = fusion_.data() + r * region + offsets_[mi];
      if (!m.status.ok()) {
        pack_dst_of_failed_.push_back(region_dst);
        failed_bytes_.push_back(bytes);
        continue;
      }
      const ResolvedIo& io = resolved[r];
      pack_.push_back(CopySegment{reinterpret_cast<uint64_t>(io.input.data),
                                  reinterpret_cast<uint64_t>(region_dst), bytes / esize, 0});
      unpack_.push_back(CopySegment{reinterpret_cast<uint64_t>(fusion_.data() + offsets_[mi]),
                                    reinterpret_cast<uint64_t>(io.output.data), bytes / esize,
                                    0});
      if (io.input.event != nullptr) wait_events.push_back(io.input.event);
      if (io.output.event != nullptr) record_events.push_back(io.output.event);
    }
    for (ResolvedIo& io : resolved) holds.push_back(std::move(io));
  }

  // Steps 2-7.
  if (absl::Status s = Enqueue(response, count, region, local, op, postscale, compress,
                               Distinct(std::move(wait_events)),
                               Distinct(std::move(record_events)));
      !s.ok()) {
    comm_->Abort(s);
    // Drain what was enqueued before returning (bounded: NCCL has exited).
    (void)WaitForCompletion(what);
    return s;
  }
  // Step 8. `holds` keeps mappings and events open until here.
  return WaitForCompletion(what);
}

absl::Status NcclBackend::Enqueue(Response& response, uint64_t count, uint64_t region,
                                  size_t local, ReduceOp op, double postscale, bool compress,
                                  const std::vector<cudaEvent_t>& wait_events,
                                  const std::vector<cudaEvent_t>& record_events) {
  const cudaStream_t s = stream_.get();
  const DType dtype = response.dtype;
  const absl::Time deadline = absl::Now() + options_.collective_timeout;

  // Step 2: one upload of both descriptor arrays.
  const uint64_t pack_chunks = kernels::cuda::AssignCopyChunks(dtype, pack_.data(), pack_.size());
  const uint64_t unpack_chunks =
      kernels::cuda::AssignCopyChunks(dtype, unpack_.data(), unpack_.size());
  const size_t desc_bytes = (pack_.size() + unpack_.size()) * sizeof(CopySegment);
  if (desc_bytes > 0) {
    if (absl::Status st = staging_.Reserve(desc_bytes); !st.ok()) return st;
    if (absl::Status st = descriptors_.Reserve(desc_bytes); !st.ok()) return st;
    std::memcpy(staging_.data(), pack_.data(), pack_.size() * sizeof(CopySegment));
    std::memcpy(staging_.data() + pack_.size() * sizeof(CopySegment), unpack_.data(),
                unpack_.size() * sizeof(CopySegment));
    KOLO_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(descriptors_.data(), staging_.data(), desc_bytes,
                                              cudaMemcpyHostToDevice, s),
                              "uploading copy descriptors");
  }
  const auto* pack_desc = reinterpret_cast<const CopySegment*>(descriptors_.data());
  const auto* unpack_desc = pack_desc + pack_.size();

  // Step 3: the GPU waits for each client's producer work.
  for (cudaEvent_t e : wait_events) {
    KOLO_RETURN_IF_CUDA_ERROR(cudaStreamWaitEvent(s, e, 0), "cudaStreamWaitEvent on an input");
  }
  // Members that failed locally contribute zeros (see the header).
  for (size_t i = 0; i < pack_dst_of_failed_.size(); ++i) {
    KOLO_RETURN_IF_CUDA_ERROR(cudaMemsetAsync(pack_dst_of_failed_[i], 0, failed_bytes_[i], s),
                              "zeroing a failed member");
  }
  // Step 4: pack with prescale.
  KOLO_RETURN_IF_LAUNCH_ERROR(kernels::cuda::BatchedCopyAsync(
                            dtype, pack_desc, static_cast<uint32_t>(pack_.size()), pack_chunks,
                            response.prescale, s),
                        "pack kernel");
  // Step 5: local ranks.
  if (local > 1) {
    std::vector<const void*> srcs(local);
    for (size_t r = 0; r < local; ++r) srcs[r] = fusion_.data() + r * region;
    KOLO_RETURN_IF_LAUNCH_ERROR(kernels::cuda::ReduceAsync(dtype, op, srcs.data(),
                                                     static_cast<int>(local), fusion_.data(),
                                                     count, 1.0, 1.0, s),
                          "local reduce kernel");
  }
  // Step 6: between daemons.
  if (comm_->size() > 1) {
    if (compress) {
      const DType wire = response.compression == Compression::kFloat16 ? DType::kFloat16
                                                                        : DType::kBFloat16;
      auto* f32 = reinterpret_cast<float*>(fusion_.data());
      auto* narrow = reinterpret_cast<uint16_t*>(fusion_.data() + region * local);
      KOLO_RETURN_IF_LAUNCH_ERROR(kernels::cuda::NarrowFloat32Async(wire, f32, narrow, count, s),
                            "compression kernel");
      if (absl::Status st = comm_->AllReduce(narrow, narrow, count, wire, op, s, deadline);
          !st.ok()) {
        return st;
      }
      KOLO_RETURN_IF_LAUNCH_ERROR(kernels::cuda::WidenToFloat32Async(wire, narrow, f32, count, s),
                            "decompression kernel");
    } else if (absl::Status st = comm_->AllReduce(fusion_.data(), fusion_.data(), count, dtype,
                                                  op, s, deadline);
               !st.ok()) {
      return st;
    }
  }
  // Step 7: unpack with postscale, then tell each client.
  KOLO_RETURN_IF_LAUNCH_ERROR(kernels::cuda::BatchedCopyAsync(dtype, unpack_desc,
                                                        static_cast<uint32_t>(unpack_.size()),
                                                        unpack_chunks, postscale, s),
                        "unpack kernel");
  for (cudaEvent_t e : record_events) {
    KOLO_RETURN_IF_CUDA_ERROR(cudaEventRecord(e, s), "recording an output event");
  }
  return done_.Record(s);
}

absl::Status NcclBackend::WaitForCompletion(const std::string& what) {
  watchdog_->Begin(what, absl::Now() + options_.collective_timeout);
  absl::Status result;
  int polls = 0;
  absl::Duration sleep = absl::Microseconds(20);
  // After an abort the stream drains quickly; give it this long at most.
  absl::Time drain_deadline = absl::InfiniteFuture();
  while (true) {
    absl::StatusOr<bool> complete = done_.IsComplete();
    if (!complete.ok()) {
      result = complete.status();
      break;
    }
    if (*complete) break;
    if (absl::Status f = watchdog_->failure(); !f.ok() && result.ok()) {
      result = f;
      drain_deadline = absl::Now() + absl::Seconds(10);
    }
    if (absl::Now() >= drain_deadline) break;
    if (polls++ < 256) {
      std::this_thread::yield();
    } else {
      absl::SleepFor(sleep);
      if (sleep < absl::Microseconds(500)) sleep *= 2;
    }
  }
  watchdog_->End();
  if (result.ok() && comm_->aborted()) result = comm_->abort_cause();
  if (!result.ok()) {
    return absl::Status(result.code(), absl::StrCat(what, ": ", result.message()));
  }
  return absl::OkStatus();
}

}  // namespace kolo::daemon::nccl
