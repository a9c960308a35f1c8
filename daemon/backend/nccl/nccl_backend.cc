#include "daemon/backend/nccl/nccl_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/cuda/cuda_status.h"
#include "common/scatter_rows.h"
#include "daemon/backend/nccl/nccl_lane.h"
#include "kernels/cuda/cast.h"
#include "kernels/cuda/reduce.h"
#include "kernels/cuda/scale.h"
#include "proto/kolo/abi/collective_traits.h"
#include "spdlog/spdlog.h"

// Returns from the enclosing function if a Kolo kernel launch failed.
#define KOLO_RETURN_IF_LAUNCH_ERROR(launch, what)                             \
  do {                                                                        \
    if (absl::Status kolo_launch_ = cuda::CudaLaunchStatus((launch), (what)); \
        !kolo_launch_.ok()) {                                                 \
      return kolo_launch_;                                                    \
    }                                                                         \
  } while (0)

namespace kolo::daemon::nccl {

using layout::AlignUp;
using layout::Describe;
using layout::Distinct;
using layout::kMemberAlign;
using layout::kRegionAlign;

absl::StatusOr<std::unique_ptr<NcclBackend>> NcclBackend::Create(const NcclBackendOptions& options,
                                                                 DeviceTensorResolver* resolver) {
  if (options.comm.unique_id.size() != NCCL_UNIQUE_ID_BYTES) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL unique id of ",
                                                   options.comm.unique_id.size(), " bytes (want ",
                                                   NCCL_UNIQUE_ID_BYTES, ")"));
  }
  absl::StatusOr<std::vector<DeviceLane>> places = LocalLanes(options.comm, options.local_ranks);
  if (!places.ok()) return places.status();
  if (places->empty()) {
    return absl::FailedPreconditionError("no rank of this node has a GPU in the job");
  }
  std::vector<std::unique_ptr<Lane>> lanes;
  std::vector<NcclLaneRank> ranks;
  for (DeviceLane& place : *places) {
    if (place.ranks.size() > static_cast<size_t>(kernels::cuda::kMaxReduceSources)) {
      return absl::InvalidArgumentError(
          absl::StrCat(place.ranks.size(), " ranks on CUDA device ", place.device, " (at most ",
                       kernels::cuda::kMaxReduceSources, " per GPU)"));
    }
    absl::StatusOr<cuda::CudaDevice> device = cuda::CudaDevice::Open(place.device);
    if (!device.ok()) return device.status();
    absl::StatusOr<cuda::CudaStream> stream = cuda::CudaStream::Create();
    if (!stream.ok()) return stream.status();
    absl::StatusOr<cuda::CudaEvent> done = cuda::CudaEvent::Create();
    if (!done.ok()) return done.status();
    if (!device->mps()) {
      spdlog::warn(
          "CUDA device {} ({}) is not shared through MPS: every device collective switches the "
          "GPU between a rank's context and kolod's and back (about 0.14 ms each way measured on "
          "an H200, against 0.01 ms under MPS); start nvidia-cuda-mps-control -d for kolod and "
          "the ranks (docs/operator-guide.md, \"GPUs\")",
          place.device, device->name());
    }
    ranks.push_back(NcclLaneRank{place.nccl_rank, place.device});
    lanes.push_back(std::make_unique<Lane>(std::move(place), std::move(*device), std::move(*stream),
                                           std::move(*done)));
  }
  NcclUniqueIdBytes id;
  std::memcpy(id.data(), options.comm.unique_id.data(), id.size());
  absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm = NcclCommunicator::Create(
      id, options.comm.nranks, std::move(ranks), options.init_timeout, options.cancel);
  if (!comm.ok()) return comm.status();
  std::unique_ptr<NcclBackend> backend(
      new NcclBackend(options, resolver, std::move(lanes), std::move(*comm)));
  absl::MutexLock lock(&backend->mu_);
  for (auto& lane : backend->lanes_) {
    if (absl::Status s = lane->device.MakeCurrent(); !s.ok()) return s;
    const uint64_t bytes = options.initial_fusion_bytes * lane->place.ranks.size();
    if (absl::Status s = lane->fusion.Reserve(bytes); !s.ok()) return s;
  }
  return backend;
}

NcclBackend::NcclBackend(NcclBackendOptions options, DeviceTensorResolver* resolver,
                         std::vector<std::unique_ptr<Lane>> lanes,
                         std::unique_ptr<NcclCommunicator> comm)
    : options_(std::move(options)),
      resolver_(resolver),
      lanes_(std::move(lanes)),
      comm_(std::move(comm)) {
  for (size_t l = 0; l < lanes_.size(); ++l) {
    for (size_t i = 0; i < lanes_[l]->place.ranks.size(); ++i) {
      slots_[lanes_[l]->place.ranks[i]] = Slot{l, i};
    }
  }
  watchdog_ = std::make_unique<CollectiveWatchdog>(comm_.get(), &lanes_.front()->device,
                                                   options_.watchdog_interval);
}

NcclBackend::~NcclBackend() {
  watchdog_.reset();  // before the communicator it watches
  absl::MutexLock lock(&mu_);
  // Let enqueued work finish before its buffers are freed (after an abort
  // the NCCL kernels have exited, so this does not wait on a dead peer), but
  // not forever: a pack kernel may wait on a client's event that never fires.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  for (auto& lane : lanes_) {
    (void)lane->device.MakeCurrent();
    while (cudaStreamQuery(lane->stream.get()) == cudaErrorNotReady && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
    }
  }
}

absl::Status NcclBackend::Execute(Response& response, const StepContext& step) {
  absl::MutexLock lock(&mu_);
  const bool broadcast = response.kind == CollectiveKind::kBroadcast;
  const bool gather = response.kind == CollectiveKind::kAllgather;
  if (!Traits(response.kind).device) {
    return absl::UnimplementedError(
        absl::StrCat("the nccl backend does not run ", CollectiveKindName(response.kind), " yet"));
  }
  step_ = &step;
  const std::string what = Describe(response);
  if (comm_->aborted()) {
    return absl::FailedPreconditionError(absl::StrCat(
        what,
        ": the job's NCCL communicator was aborted earlier: ", comm_->abort_cause().message()));
  }
  // One deadline for the whole collective: enqueueing and completion.
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + options_.collective_timeout;
  std::vector<ResolvedIo> holds;  // keeps mappings and events open until the end
  absl::StatusOr<bool> runs =
      gather ? PrepareAllgather(response, &holds) : Prepare(response, broadcast, &holds);
  if (!runs.ok()) {
    // Every daemon plans the same response; one that cannot run it must not
    // leave the others waiting.
    comm_->Abort(runs.status());
    return runs.status();
  }
  if (!*runs) return absl::OkStatus();  // every member failed alike everywhere
  if (comm_->size() > static_cast<int>(lanes_.size())) {
    // Other daemons take part: a member that failed only here would leave
    // them with a silently wrong result (zeros in its place). Fail the whole
    // response, here and, through the abort, everywhere.
    for (const FusedMember& m : response.members) {
      if (m.status.ok()) continue;
      absl::Status s(m.status.code(),
                     absl::StrCat(what, ": \"", m.set.name, "\" failed on this node (",
                                  m.status.message(), "); the other nodes cannot finish it"));
      comm_->Abort(s);
      return s;
    }
  }
  const absl::Time prepared = absl::Now();
  const bool direct = CanRunDirect(response, broadcast);
  if (absl::Status s =
          direct ? EnqueueDirect(response, deadline) : Enqueue(response, broadcast, deadline);
      !s.ok()) {
    comm_->Abort(s);
    // Drain what was enqueued before returning (bounded: NCCL has exited).
    // Lanes whose step 7 never ran get their completion event recorded now,
    // or the wait would see an older record and return while kernels still
    // use the mappings `holds` keeps open.
    for (auto& lane : lanes_) {
      if (lane->device.MakeCurrent().ok()) (void)lane->done.Record(lane->stream.get());
    }
    (void)WaitForCompletion(what, absl::Now() + absl::Seconds(10));
    return s;
  }
  const absl::Time enqueued = absl::Now();
  absl::Status done = WaitForCompletion(what, deadline);
  // Where a device collective's time goes (kolod --log_level=debug).
  spdlog::debug("{} ({} path): prepare {:.1f} us, enqueue {:.1f} us, gpu wait {:.1f} us", what,
                direct ? "direct" : "fused", absl::ToDoubleMicroseconds(prepared - start),
                absl::ToDoubleMicroseconds(enqueued - prepared),
                absl::ToDoubleMicroseconds(absl::Now() - enqueued));
  return done;
}

// Prepares `response`: the layout of the fused regions on every lane, then
// each member's requests resolved to their lanes (copy segments, events).
// `holds` keeps the resolved IPC mappings open until the collective is done.
absl::StatusOr<bool> NcclBackend::Prepare(Response& response, bool broadcast,
                                          std::vector<ResolvedIo>* holds) {
  absl::StatusOr<bool> laid_out = LayOutRegions(response, broadcast);
  if (!laid_out.ok()) return laid_out.status();
  if (!*laid_out) return false;  // every member failed alike everywhere
  for (size_t mi = 0; mi < response.members.size(); ++mi) {
    if (absl::Status s = PlaceMember(response, mi, broadcast, holds); !s.ok()) return s;
  }
  for (auto& lane : lanes_) {
    lane->wait_events = Distinct(std::move(lane->wait_events));
    lane->record_events = Distinct(std::move(lane->record_events));
  }
  return true;
}

absl::StatusOr<bool> NcclBackend::LayOutRegions(Response& response, bool broadcast) {
  const std::string what = Describe(response);
  const size_t esize = DTypeSize(response.dtype);
  if (esize == 0 || response.total_bytes % esize != 0 || response.members.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": malformed response"));
  }
  op_ = response.op;
  postscale_ = response.postscale;
  if (op_ == ReduceOp::kAverage) {
    op_ = ReduceOp::kSum;
    postscale_ /= std::max(1, response.members.front().set.set_size);
  }
  root_ = -1;
  if (broadcast) {
    const int root = response.root_rank;
    if (root < 0 || root >= static_cast<int>(options_.comm.nccl_rank.size()) ||
        options_.comm.nccl_rank[root] < 0) {
      // Every daemon sees the same plan and reaches this verdict: the
      // members fail everywhere and no NCCL call is made.
      for (FusedMember& m : response.members) {
        if (!m.status.ok()) continue;
        m.status = absl::FailedPreconditionError(
            absl::StrCat("broadcast \"", m.set.name, "\": root rank ", root,
                         " has no GPU in the job's "
                         "communicator (a rank's first device tensor places it)"));
      }
      return false;
    }
    root_ = options_.comm.nccl_rank[root];
  } else if (comm_->size() > 1) {
    // The NCCL step needs an NCCL type (there is none for int16 or uint16). Every
    // daemon sees the same plan and reaches this verdict: the members fail
    // everywhere, naming the dtype, and no NCCL call is made.
    if (absl::StatusOr<ncclDataType_t> type = ToNcclType(response.dtype); !type.ok()) {
      for (FusedMember& m : response.members) {
        if (!m.status.ok()) continue;
        m.status = absl::Status(type.status().code(),
                                absl::StrCat(CollectiveKindName(response.kind), " \"", m.set.name,
                                             "\": ", type.status().message()));
      }
      return false;
    }
  }
  // The backend's own layout of a region: each member starts on a 16-byte
  // boundary so pack/unpack move whole vectors (the planner's offsets are
  // dense). Every daemon derives the same layout from the same response, so
  // the NCCL step lines up; the padding is reduced along and never read.
  offsets_.clear();
  uint64_t fused_bytes = 0;
  for (const FusedMember& m : response.members) {
    fused_bytes = AlignUp(fused_bytes, kMemberAlign);
    offsets_.push_back(fused_bytes);
    if (m.set.requests.empty() || m.offset + m.set.requests.front().bytes > response.total_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": member \"", m.set.name, "\" does not fit the response"));
    }
    fused_bytes += m.set.requests.front().bytes;
  }
  fused_bytes = AlignUp(fused_bytes, esize);
  count_ = broadcast ? fused_bytes : fused_bytes / esize;
  region_ = AlignUp(fused_bytes, kRegionAlign);
  compress_ = Traits(response.kind).compresses &&
              response.compression != Compression::kNone && response.dtype == DType::kFloat32 &&
              comm_->size() > 1;
  for (auto& lane : lanes_) {
    const size_t regions = broadcast ? 1 : lane->place.ranks.size();
    const uint64_t bytes = region_ * regions + (compress_ ? AlignUp(count_ * 2, kRegionAlign) : 0);
    if (absl::Status s = lane->Reset(bytes); !s.ok()) return s;
  }
  return true;
}

// Resolves member `mi`'s requests on their ranks' lanes. A member whose
// tensors cannot be used fails alone (zeros take its place on every lane,
// so the collective still runs).
absl::Status NcclBackend::PlaceMember(Response& response, size_t mi, bool broadcast,
                                      std::vector<ResolvedIo>* holds) {
  const size_t esize = DTypeSize(response.dtype);
  const uint64_t unit = broadcast ? 1 : esize;  // copy element size
  FusedMember& m = response.members[mi];
  const uint64_t bytes = m.set.requests.front().bytes;
  if (!broadcast && m.set.joined > 0 && op_ != ReduceOp::kSum && m.status.ok()) {
    m.status = absl::UnimplementedError(
        absl::StrCat("allreduce \"", m.set.name, "\": ", ReduceOpName(response.op),
                     " with joined ranks is not supported for device tensors"));
  }
  // Which region of which lane each request fills.
  std::vector<std::pair<const Request*, Slot>> placed;
  for (const Request& r : m.set.requests) {
    if (!m.status.ok()) break;
    auto it = slots_.find(r.rank);
    if (it == slots_.end()) {
      m.status = absl::FailedPreconditionError(absl::StrCat(
          CollectiveKindName(response.kind), " \"", m.set.name, "\": rank ", r.rank,
          " has no GPU in the job's communicator (its first device tensor places it)"));
      break;
    }
    const Lane& lane = *lanes_[it->second.lane];
    if (r.device.has_value() && r.device->input.device != lane.place.device) {
      m.status = absl::FailedPreconditionError(
          absl::StrCat(CollectiveKindName(response.kind), " \"", m.set.name, "\": rank ", r.rank,
                       " sent a tensor on CUDA device ", r.device->input.device,
                       "; its GPU in this job is "
                       "device ",
                       lane.place.device, " (a rank keeps the GPU of its first device tensor)"));
      break;
    }
    placed.push_back({&r, it->second});
  }
  std::vector<ResolvedIo> resolved;
  for (const auto& [r, slot] : placed) {
    if (!m.status.ok()) break;
    if (absl::Status s = lanes_[slot.lane]->device.MakeCurrent(); !s.ok()) return s;
    absl::StatusOr<ResolvedIo> io = resolver_->Resolve(*r);
    if (!io.ok()) {
      m.status = io.status();
      break;
    }
    resolved.push_back(std::move(*io));
  }
  const bool scatter = response.kind == CollectiveKind::kReducescatter;
  const uint64_t row = scatter ? RowBytes(m.set.requests.front()) : 0;
  const int64_t total_rows =
      scatter && !m.set.requests.front().shape.empty() ? m.set.requests.front().shape.front() : 0;
  const int64_t positions = std::max(1, m.set.set_size);
  for (size_t k = 0; scatter && m.status.ok() && k < resolved.size(); ++k) {
    // Each rank's output holds its rows alone (common/scatter_rows.h).
    const int pos = Position(placed[k].first->rank);
    if (pos < 0 || pos >= positions) {
      m.status = absl::InvalidArgumentError(absl::StrCat("reducescatter \"", m.set.name,
                                                         "\": rank ", placed[k].first->rank,
                                                         " is not in the process set"));
      break;
    }
    const uint64_t want = static_cast<uint64_t>(ScatterRows(total_rows, positions, pos)) * row;
    if (resolved[k].output.bytes != want) {
      m.status = absl::InvalidArgumentError(absl::StrCat(
          "reducescatter \"", m.set.name, "\": rank ", placed[k].first->rank, "'s output has ",
          resolved[k].output.bytes, " bytes; its rows of the result have ", want));
    }
  }
  if (!m.status.ok()) {
    // Zeros instead of this member, on every lane: the collective runs.
    for (auto& lane : lanes_) {
      const size_t regions = broadcast ? 1 : lane->place.ranks.size();
      for (size_t i = 0; i < regions; ++i) {
        lane->zero.push_back({lane->region(i, region_) + offsets_[mi], bytes});
      }
    }
    return absl::OkStatus();
  }
  // Allreduce: every region a rank of this member does not fill (a joined
  // rank) holds zeros.
  if (!broadcast) {
    for (size_t l = 0; l < lanes_.size(); ++l) {
      Lane& lane = *lanes_[l];
      for (size_t i = 0; i < lane.place.ranks.size(); ++i) {
        bool filled = false;
        for (const auto& [r, slot] : placed)
          filled = filled || (slot.lane == l && slot.region == i);
        if (!filled) lane.zero.push_back({lane.region(i, region_) + offsets_[mi], bytes});
      }
    }
  }
  for (size_t k = 0; k < placed.size(); ++k) {
    const auto& [r, slot] = placed[k];
    const ResolvedIo& io = resolved[k];
    Lane& lane = *lanes_[slot.lane];
    uint8_t* lane_result = lane.region(0, region_) + offsets_[mi];
    const bool is_root = broadcast && r->rank == response.root_rank;
    if (!broadcast || is_root) {
      lane.pack.push_back(
          CopySegment{reinterpret_cast<uint64_t>(io.input.data),
                      reinterpret_cast<uint64_t>(lane.region(broadcast ? 0 : slot.region, region_) +
                                                 offsets_[mi]),
                      bytes / unit, 0});
    }
    // The client's ready event follows all its work so far, including any
    // on the output: wait on it for every rank (a broadcast writes even
    // the ranks whose input it does not read).
    if (io.input.event != nullptr) lane.wait_events.push_back(io.input.event);
    // The root's own output already holds the data when it is the input.
    if (scatter) {
      const int pos = Position(r->rank);
      const uint64_t first = static_cast<uint64_t>(ScatterFirstRow(total_rows, positions, pos));
      lane.unpack.push_back(CopySegment{reinterpret_cast<uint64_t>(lane_result + first * row),
                                        reinterpret_cast<uint64_t>(io.output.data),
                                        io.output.bytes / unit, 0});
    } else if (!(is_root && io.output.data == io.input.data)) {
      lane.unpack.push_back(CopySegment{reinterpret_cast<uint64_t>(lane_result),
                                        reinterpret_cast<uint64_t>(io.output.data), bytes / unit,
                                        0});
    }
    if (io.output.event != nullptr) lane.record_events.push_back(io.output.event);
  }
  for (ResolvedIo& io : resolved) holds->push_back(std::move(io));
  return absl::OkStatus();
}

absl::Status NcclBackend::Enqueue(Response& response, bool broadcast, absl::Time deadline) {
  const bool gather = response.kind == CollectiveKind::kAllgather;
  // A broadcast and an allgather move bytes; one region per lane.
  const bool bytewise = broadcast || gather;
  const DType dtype = bytewise ? DType::kUint8 : response.dtype;
  const double prescale = bytewise ? 1.0 : response.prescale;
  const double postscale = bytewise ? 1.0 : postscale_;

  // Steps 2-5 per lane.
  for (auto& lane_ptr : lanes_) {
    Lane& lane = *lane_ptr;
    if (absl::Status st = lane.device.MakeCurrent(); !st.ok()) return st;
    const cudaStream_t s = lane.stream.get();
    // Step 2: one upload of both descriptor arrays.
    const uint64_t pack_chunks =
        kernels::cuda::AssignCopyChunks(dtype, lane.pack.data(), lane.pack.size());
    lane.unpack_chunks =
        kernels::cuda::AssignCopyChunks(dtype, lane.unpack.data(), lane.unpack.size());
    const size_t desc_bytes = (lane.pack.size() + lane.unpack.size()) * sizeof(CopySegment);
    if (desc_bytes > 0) {
      if (absl::Status st = lane.staging.Reserve(desc_bytes); !st.ok()) return st;
      if (absl::Status st = lane.descriptors.Reserve(desc_bytes); !st.ok()) return st;
      std::memcpy(lane.staging.data(), lane.pack.data(), lane.pack.size() * sizeof(CopySegment));
      std::memcpy(lane.staging.data() + lane.pack.size() * sizeof(CopySegment), lane.unpack.data(),
                  lane.unpack.size() * sizeof(CopySegment));
      KOLO_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(lane.descriptors.data(), lane.staging.data(),
                                                desc_bytes, cudaMemcpyHostToDevice, s),
                                "uploading copy descriptors");
    }
    // Step 3: the GPU waits for each client's producer work.
    for (cudaEvent_t e : lane.wait_events) {
      KOLO_RETURN_IF_CUDA_ERROR(cudaStreamWaitEvent(s, e, 0), "cudaStreamWaitEvent on an input");
    }
    for (const auto& [ptr, bytes] : lane.zero) {
      KOLO_RETURN_IF_CUDA_ERROR(cudaMemsetAsync(ptr, 0, bytes, s), "zeroing a region");
    }
    // Step 4: pack with prescale.
    const auto* pack_desc = reinterpret_cast<const CopySegment*>(lane.descriptors.data());
    KOLO_RETURN_IF_LAUNCH_ERROR(
        kernels::cuda::BatchedCopyAsync(dtype, pack_desc, static_cast<uint32_t>(lane.pack.size()),
                                        pack_chunks, prescale, s),
        "pack kernel");
    // Step 5: the lane's ranks into region 0. A lone bool region is reduced
    // too (in place): its bytes become 0 or 1 before NCCL's max or min.
    const size_t regions = bytewise ? 1 : lane.place.ranks.size();
    if (regions > 1 || dtype == DType::kBool) {
      std::vector<const void*> srcs(regions);
      for (size_t r = 0; r < regions; ++r) srcs[r] = lane.region(r, region_);
      KOLO_RETURN_IF_LAUNCH_ERROR(
          kernels::cuda::ReduceAsync(dtype, op_, srcs.data(), static_cast<int>(regions),
                                     lane.region(0, region_), count_, 1.0, 1.0, s),
          "local reduce kernel");
    }
  }
  // Step 6: between GPUs and daemons, one NCCL group over every lane.
  if (comm_->size() > 1) {
    std::vector<NcclLaneBuffers> buffers;
    // In place on every lane's region 0. An allgather's is an allreduce too:
    // disjoint parts on zeroed regions, whose bytewise sum (dtype uint8, op_
    // sum, set by PrepareAllgather) is the gather.
    auto region_zero = [&] {
      for (auto& lane : lanes_) {
        uint8_t* r0 = lane->region(0, region_);
        buffers.push_back(NcclLaneBuffers{r0, r0, lane->stream.get()});
      }
    };
    if (broadcast) {
      region_zero();
      if (absl::Status st = comm_->Broadcast(buffers, count_, root_, deadline); !st.ok()) {
        return st;
      }
    } else if (compress_) {
      const DType wire =
          response.compression == Compression::kFloat16 ? DType::kFloat16 : DType::kBFloat16;
      for (auto& lane : lanes_) {
        if (absl::Status st = lane->device.MakeCurrent(); !st.ok()) return st;
        auto* f32 = reinterpret_cast<float*>(lane->region(0, region_));
        auto* narrow = reinterpret_cast<uint16_t*>(lane->region(lane->place.ranks.size(), region_));
        KOLO_RETURN_IF_LAUNCH_ERROR(
            kernels::cuda::NarrowFloat32Async(wire, f32, narrow, count_, lane->stream.get()),
            "compression kernel");
        buffers.push_back(NcclLaneBuffers{narrow, narrow, lane->stream.get()});
      }
      if (absl::Status st = comm_->AllReduce(buffers, count_, wire, op_, deadline); !st.ok()) {
        return st;
      }
      for (auto& lane : lanes_) {
        if (absl::Status st = lane->device.MakeCurrent(); !st.ok()) return st;
        auto* f32 = reinterpret_cast<float*>(lane->region(0, region_));
        auto* narrow = reinterpret_cast<uint16_t*>(lane->region(lane->place.ranks.size(), region_));
        KOLO_RETURN_IF_LAUNCH_ERROR(
            kernels::cuda::WidenToFloat32Async(wire, narrow, f32, count_, lane->stream.get()),
            "decompression kernel");
      }
    } else {
      region_zero();
      if (absl::Status st = comm_->AllReduce(buffers, count_, dtype, op_, deadline); !st.ok()) {
        return st;
      }
    }
  }
  // Step 7 per lane: unpack with postscale, then tell each client.
  for (auto& lane_ptr : lanes_) {
    Lane& lane = *lane_ptr;
    if (absl::Status st = lane.device.MakeCurrent(); !st.ok()) return st;
    const cudaStream_t s = lane.stream.get();
    const auto* unpack_desc =
        reinterpret_cast<const CopySegment*>(lane.descriptors.data()) + lane.pack.size();
    KOLO_RETURN_IF_LAUNCH_ERROR(kernels::cuda::BatchedCopyAsync(
                                    dtype, unpack_desc, static_cast<uint32_t>(lane.unpack.size()),
                                    lane.unpack_chunks, postscale, s),
                                "unpack kernel");
    if (absl::Status st = lane.RecordOutputs(s); !st.ok()) return st;
  }
  return absl::OkStatus();
}

bool NcclBackend::CanRunDirect(const Response& response, bool broadcast) const {
  if (broadcast || response.kind != CollectiveKind::kAllreduce || response.members.size() != 1 ||
      !response.members.front().status.ok() || response.prescale != 1.0 || compress_ ||
      response.dtype == DType::kBool) {
    return false;
  }
  for (const auto& lane : lanes_) {
    if (lane->place.ranks.size() != 1 || lane->pack.size() != 1 || lane->unpack.size() != 1 ||
        !lane->zero.empty()) {
      return false;
    }
  }
  return true;
}

absl::Status NcclBackend::EnqueueDirect(const Response& response, absl::Time deadline) {
  const DType dtype = response.dtype;
  const uint64_t count = lanes_.front()->pack.front().count;  // elements
  std::vector<NcclLaneBuffers> buffers;
  for (auto& lane_ptr : lanes_) {
    Lane& lane = *lane_ptr;
    if (absl::Status st = lane.device.MakeCurrent(); !st.ok()) return st;
    const cudaStream_t s = lane.stream.get();
    for (cudaEvent_t e : lane.wait_events) {
      KOLO_RETURN_IF_CUDA_ERROR(cudaStreamWaitEvent(s, e, 0), "cudaStreamWaitEvent on an input");
    }
    auto* in = reinterpret_cast<uint8_t*>(lane.pack.front().src);
    auto* out = reinterpret_cast<uint8_t*>(lane.unpack.front().dst);
    if (comm_->size() > 1) {
      buffers.push_back(NcclLaneBuffers{in, out, s});
    } else if (in != out) {
      KOLO_RETURN_IF_CUDA_ERROR(
          cudaMemcpyAsync(out, in, count * DTypeSize(dtype), cudaMemcpyDeviceToDevice, s),
          "copying the input to the output");
    }
  }
  if (comm_->size() > 1) {
    if (absl::Status st = comm_->AllReduce(buffers, count, dtype, op_, deadline); !st.ok()) {
      return st;
    }
  }
  for (auto& lane_ptr : lanes_) {
    Lane& lane = *lane_ptr;
    if (absl::Status st = lane.device.MakeCurrent(); !st.ok()) return st;
    const cudaStream_t s = lane.stream.get();
    if (postscale_ != 1.0) {
      KOLO_RETURN_IF_LAUNCH_ERROR(
          kernels::cuda::ScaleAsync(dtype, reinterpret_cast<void*>(lane.unpack.front().dst), count,
                                    postscale_, s),
          "postscale kernel");
    }
    if (absl::Status st = lane.RecordOutputs(s); !st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status NcclBackend::WaitForCompletion(const std::string& what, absl::Time deadline) {
  watchdog_->Begin(what, deadline);
  absl::Status result;
  int polls = 0;
  absl::Duration sleep = absl::Microseconds(20);
  // After an abort the streams drain quickly; give them this long at most.
  absl::Time drain_deadline = absl::InfiniteFuture();
  size_t next = 0;  // lanes before it have completed
  while (next < lanes_.size()) {
    absl::StatusOr<bool> complete = lanes_[next]->done.IsComplete();
    if (!complete.ok()) {
      // The GPU reported an error: the other lanes and daemons must not go
      // on with this collective.
      result = complete.status();
      comm_->Abort(result);
      break;
    }
    if (*complete) {
      ++next;
      continue;
    }
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
