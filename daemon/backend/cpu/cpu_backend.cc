#include "daemon/backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "daemon/algorithms/adasum.h"
#include "daemon/core/caller_memory.h"
#include "kernels/cpu/half.h"
#include "kernels/cpu/reduce.h"
#include "proto/kolo/abi/collective_traits.h"
#include "proto/kolo/abi/shm_abi_v1.h"

namespace kolo::daemon {
namespace {

// Rounds float32 values to 16 bits and back, in place (compression).
void RoundTrip(Compression c, float* data, size_t count) {
  std::vector<uint16_t> tmp(count);
  if (c == Compression::kFloat16) {
    kernels::FloatToHalfArray(data, tmp.data(), count);
    kernels::HalfToFloatArray(tmp.data(), data, count);
  } else {
    kernels::FloatToBFloat16Array(data, tmp.data(), count);
    kernels::BFloat16ToFloatArray(tmp.data(), data, count);
  }
}

// Allocates one result per request, in request order (the executor frees
// them if the member fails).
absl::Status AllocateResults(ResultAllocator* results, FusedMember& m,
                             const std::vector<uint64_t>& bytes, const std::vector<int64_t>& rows) {
  if (results == nullptr) {
    return absl::InternalError(absl::StrCat("\"", m.set.name, "\": no result area to write to"));
  }
  m.results.clear();
  for (size_t i = 0; i < m.set.requests.size(); ++i) {
    if (absl::StatusOr<uint8_t*> at = results->Allocate(m, bytes[i], rows[i]); !at.ok()) {
      return at.status();
    }
  }
  return absl::OkStatus();
}

uint8_t* ResultData(const FusedMember& m, size_t i) { return m.results[i].data; }

// Tensors in a rank's own memory (caller memory) move in pieces this size,
// so a piece read, reduced and written back stays in the core's cache.
constexpr uint64_t kCallerPieceBytes = 128 << 10;

// Scratch buffers of the calling worker thread, for caller-memory pieces.
uint8_t* Scratch(size_t i, uint64_t bytes) {
  thread_local std::vector<std::vector<uint8_t>> buffers;
  if (buffers.size() <= i) buffers.resize(i + 1);
  if (buffers[i].size() < bytes) buffers[i].resize(bytes);
  return buffers[i].data();
}

bool AnyCaller(const std::vector<Request>& reqs) {
  return std::any_of(reqs.begin(), reqs.end(),
                     [](const Request& q) { return q.caller != nullptr; });
}

// A failed access to rank q's memory, as the collective's error.
absl::Status CallerError(const FusedMember& m, const Request& q, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat("\"", m.set.name, "\": rank ", q.rank,
                                             "'s tensor in its own memory: ", s.message()));
}

// Reduces elements [first, first + count) of every rank's input into every
// rank's output: straight between the arenas, or through scratch for the
// ranks whose tensors are in their own memory (read, reduced in cache,
// written back).
absl::Status ReduceRange(const Response& r, const FusedMember& m, ReduceOp op, double postscale,
                         bool zero_operand, uint64_t first, uint64_t count, size_t esize) {
  const std::vector<Request>& reqs = m.set.requests;
  const uint64_t off = first * esize, bytes = count * esize;
  std::vector<const void*> srcs;
  std::vector<void*> dsts;
  std::vector<std::vector<float>> rounded;
  std::vector<uint8_t> zeros;
  size_t scratch = 0;
  for (const Request& q : reqs) {
    // (A request in caller memory has no arena pointers: input is null.)
    const uint8_t* in;
    if (q.caller != nullptr) {
      uint8_t* at = Scratch(scratch++, bytes);
      if (absl::Status s = q.caller->Read(q.caller_input + off, at, bytes); !s.ok()) {
        return CallerError(m, q, s);
      }
      in = at;
    } else {
      in = q.input + off;
    }
    if (r.compression != Compression::kNone) {
      const float* f = reinterpret_cast<const float*>(in);
      rounded.emplace_back(f, f + count);
      RoundTrip(r.compression, rounded.back().data(), count);
      srcs.push_back(rounded.back().data());
    } else {
      srcs.push_back(in);
    }
    if (q.caller == nullptr) dsts.push_back(q.output + off);
  }
  uint8_t* out = nullptr;  // the result for the ranks of caller memory
  if (scratch > 0) {
    out = Scratch(scratch, bytes);
    dsts.push_back(out);
  }
  if (zero_operand) {
    zeros.assign(bytes, 0);
    srcs.push_back(zeros.data());
  }
  absl::Status s = kernels::Reduce(r.dtype, op, absl::MakeSpan(srcs), absl::MakeSpan(dsts), count,
                                   r.prescale, postscale);
  if (!s.ok()) return s;
  if (r.compression != Compression::kNone) {
    for (void* d : dsts) RoundTrip(r.compression, static_cast<float*>(d), count);
  }
  for (const Request& q : reqs) {
    if (q.caller == nullptr) continue;
    if (absl::Status w = q.caller->Write(q.caller_output + off, out, bytes); !w.ok()) {
      return CallerError(m, q, w);
    }
  }
  return absl::OkStatus();
}

// Copies elements [first, first + count) of the root's input to every other
// rank's output, reading and writing caller memory where a rank has it.
absl::Status BroadcastRange(const Response& r, const FusedMember& m, uint64_t first, uint64_t count,
                            size_t esize) {
  const std::vector<Request>& reqs = m.set.requests;
  const uint64_t off = first * esize, bytes = count * esize;
  const Request* root = nullptr;
  for (const Request& q : reqs) {
    if (q.rank == r.root_rank) root = &q;
  }
  if (root == nullptr) return absl::InternalError("broadcast root missing");
  const uint8_t* src;
  if (root->caller != nullptr) {
    uint8_t* at = Scratch(0, bytes);
    if (absl::Status s = root->caller->Read(root->caller_input + off, at, bytes); !s.ok()) {
      return CallerError(m, *root, s);
    }
    src = at;
  } else {
    src = root->input + off;
  }
  std::vector<void*> dsts;
  for (const Request& q : reqs) {
    if (q.caller != nullptr) {
      if (&q == root && q.caller_output == q.caller_input) continue;
      if (absl::Status w = q.caller->Write(q.caller_output + off, src, bytes); !w.ok()) {
        return CallerError(m, q, w);
      }
    } else if (q.output + off != src) {
      dsts.push_back(q.output + off);
    }
  }
  if (dsts.empty()) return absl::OkStatus();
  return kernels::ScaleCopy(r.dtype, src, absl::MakeSpan(dsts), count, 1.0);
}

// Adasum of one member: the tree over its ranks' tensors (rank order), read
// from and written to caller memory where a rank has it.
absl::Status AdasumMember(const Response& r, const FusedMember& m) {
  const size_t esize = DTypeSize(r.dtype);
  const uint64_t bytes = m.set.requests.front().bytes;
  std::vector<const Request*> ranks;
  for (const Request& q : m.set.requests) ranks.push_back(&q);
  std::sort(ranks.begin(), ranks.end(),
            [](const Request* a, const Request* b) { return a->rank < b->rank; });
  std::vector<std::vector<uint8_t>> read(ranks.size());
  std::vector<const void*> inputs;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const Request& q = *ranks[i];
    if (q.caller != nullptr) {
      read[i].resize(bytes);
      if (absl::Status s = q.caller->Read(q.caller_input, read[i].data(), bytes); !s.ok()) {
        return CallerError(m, q, s);
      }
      inputs.push_back(read[i].data());
    } else {
      inputs.push_back(q.input);
    }
  }
  std::vector<uint8_t> result(bytes);
  if (absl::Status s = AdasumTree(r.dtype, inputs, result.data(), bytes / esize,
                                  r.prescale * r.postscale);
      !s.ok()) {
    return s;
  }
  for (const Request& q : m.set.requests) {
    if (q.caller != nullptr) {
      if (absl::Status w = q.caller->Write(q.caller_output, result.data(), bytes); !w.ok()) {
        return CallerError(m, q, w);
      }
    } else if (bytes > 0) {
      std::memcpy(q.output, result.data(), bytes);
    }
  }
  return absl::OkStatus();
}

}  // namespace

void CpuBackend::PlanAllreduce(const Response& r, FusedMember& m, std::vector<Task>* tasks) {
  const std::vector<Request>& reqs = m.set.requests;
  if (r.op == ReduceOp::kAdasum) {
    // The coefficients need the whole tensor: one task a member.
    tasks->push_back([&m, &r]() { return AdasumMember(r, m); });
    return;
  }
  const size_t esize = DTypeSize(r.dtype);
  ReduceOp op = r.op;
  double postscale = r.postscale;
  if (op == ReduceOp::kAverage) {
    op = ReduceOp::kSum;
    postscale /= m.set.set_size;
  }
  // Joined ranks contribute zeros: nothing to add to a sum, but a zero
  // operand for min, max and product.
  const bool zero_operand = m.set.joined > 0 && op != ReduceOp::kSum;
  const uint64_t n = reqs.front().bytes / esize;
  const uint64_t chunk = std::max<uint64_t>(1, chunk_bytes_ / esize);
  const uint64_t piece = AnyCaller(reqs) ? std::max<uint64_t>(1, kCallerPieceBytes / esize) : chunk;
  for (uint64_t first = 0; first < n; first += chunk) {
    const uint64_t count = std::min(chunk, n - first);
    tasks->push_back([&m, &r, op, postscale, zero_operand, first, count, esize, piece]() {
      for (uint64_t done = 0; done < count; done += piece) {
        absl::Status s = ReduceRange(r, m, op, postscale, zero_operand, first + done,
                                     std::min(piece, count - done), esize);
        if (!s.ok()) return s;
      }
      return absl::OkStatus();
    });
  }
}

void CpuBackend::PlanBroadcast(const Response& r, FusedMember& m, std::vector<Task>* tasks) {
  const size_t esize = DTypeSize(r.dtype);
  const uint64_t n = m.set.requests.front().bytes / esize;
  const uint64_t chunk = std::max<uint64_t>(1, chunk_bytes_ / esize);
  const uint64_t piece =
      AnyCaller(m.set.requests) ? std::max<uint64_t>(1, kCallerPieceBytes / esize) : chunk;
  for (uint64_t first = 0; first < n; first += chunk) {
    const uint64_t count = std::min(chunk, n - first);
    tasks->push_back([&m, &r, first, count, esize, piece]() {
      for (uint64_t done = 0; done < count; done += piece) {
        absl::Status s = BroadcastRange(r, m, first + done, std::min(piece, count - done), esize);
        if (!s.ok()) return s;
      }
      return absl::OkStatus();
    });
  }
}

absl::Status CpuBackend::PlanAllgather(FusedMember& m, ResultAllocator* results,
                                       std::vector<Task>* tasks) {
  const std::vector<Request>& reqs = m.set.requests;
  const uint64_t row = RowBytes(reqs.front());
  int64_t total_rows = 0;
  for (const Request& q : reqs) total_rows += q.shape[0];
  std::vector<uint64_t> bytes(reqs.size(), static_cast<uint64_t>(total_rows) * row);
  std::vector<int64_t> rows(reqs.size(), total_rows);
  if (absl::Status s = AllocateResults(results, m, bytes, rows); !s.ok()) return s;
  // Destination d receives every source s's rows at s's prefix offset.
  for (size_t d = 0; d < reqs.size(); ++d) {
    uint64_t at = 0;
    for (size_t s = 0; s < reqs.size(); ++s) {
      const uint64_t len = reqs[s].bytes;
      if (len > 0) {
        tasks->push_back([&m, d, s, at, len]() {
          std::memcpy(ResultData(m, d) + at, m.set.requests[s].input, len);
          return absl::OkStatus();
        });
      }
      at += len;
    }
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::PlanReducescatter(const Response& r, FusedMember& m,
                                           ResultAllocator* results, std::vector<Task>* tasks) {
  const std::vector<Request>& reqs = m.set.requests;
  const int64_t n = static_cast<int64_t>(reqs.size());
  const int64_t total_rows = reqs.front().shape[0];
  const uint64_t row = RowBytes(reqs.front());
  const size_t esize = DTypeSize(r.dtype);
  std::vector<uint64_t> bytes(n);
  std::vector<int64_t> rows(n), first_row(n);
  int64_t next = 0;
  for (int64_t i = 0; i < n; ++i) {
    rows[i] = total_rows / n + (i < total_rows % n ? 1 : 0);
    first_row[i] = next;
    next += rows[i];
    bytes[i] = static_cast<uint64_t>(rows[i]) * row;
  }
  if (absl::Status s = AllocateResults(results, m, bytes, rows); !s.ok()) return s;
  ReduceOp op = r.op;
  double postscale = r.postscale;
  if (op == ReduceOp::kAverage) {
    op = ReduceOp::kSum;
    postscale /= m.set.set_size;
  }
  const uint64_t chunk = std::max<uint64_t>(1, chunk_bytes_ / esize);
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t elems = bytes[i] / esize;
    const uint64_t base = static_cast<uint64_t>(first_row[i]) * row;
    for (uint64_t first = 0; first < elems; first += chunk) {
      const uint64_t count = std::min(chunk, elems - first);
      tasks->push_back([&m, &r, op, postscale, i, base, first, count, esize]() {
        std::vector<const void*> srcs;
        for (const Request& q : m.set.requests) srcs.push_back(q.input + base + first * esize);
        void* dst = ResultData(m, i) + first * esize;
        return kernels::Reduce(r.dtype, op, absl::MakeSpan(srcs), absl::MakeSpan(&dst, 1), count,
                               r.prescale, postscale);
      });
    }
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::PlanAlltoall(FusedMember& m, ResultAllocator* results,
                                      std::vector<Task>* tasks) {
  const std::vector<Request>& reqs = m.set.requests;
  const size_t n = reqs.size();
  const uint64_t row = RowBytes(reqs.front());
  // splits[i][j]: rows rank i sends to rank j.
  std::vector<std::vector<int64_t>> splits(n);
  for (size_t i = 0; i < n; ++i) {
    splits[i] = reqs[i].aux;
    if (splits[i].empty()) splits[i].assign(n, reqs[i].shape[0] / static_cast<int64_t>(n));
  }
  const uint64_t header = abi::v1::AlltoallResultHeaderBytes(n);
  std::vector<uint64_t> bytes(n);
  std::vector<int64_t> rows(n, 0);
  for (size_t j = 0; j < n; ++j) {
    for (size_t i = 0; i < n; ++i) rows[j] += splits[i][j];
    bytes[j] = header + static_cast<uint64_t>(rows[j]) * row;
  }
  if (absl::Status s = AllocateResults(results, m, bytes, rows); !s.ok()) return s;
  for (size_t j = 0; j < n; ++j) {
    int64_t* received = reinterpret_cast<int64_t*>(ResultData(m, j));
    for (size_t i = 0; i < n; ++i) received[i] = splits[i][j];
    uint64_t at = header;
    for (size_t i = 0; i < n; ++i) {
      const uint64_t src_off = static_cast<uint64_t>(std::accumulate(
                                   splits[i].begin(), splits[i].begin() + j, int64_t{0})) *
                               row;
      const uint64_t len = static_cast<uint64_t>(splits[i][j]) * row;
      if (len > 0) {
        tasks->push_back([&m, i, j, at, src_off, len]() {
          std::memcpy(ResultData(m, j) + at, m.set.requests[i].input + src_off, len);
          return absl::OkStatus();
        });
      }
      at += len;
    }
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::Execute(Response& response, const StepContext& step) {
  std::vector<Task> tasks;
  uint64_t total = 0;
  for (FusedMember& m : response.members) {
    total += m.set.requests.front().bytes * m.set.requests.size();
    switch (response.kind) {
      case CollectiveKind::kAllreduce:
        PlanAllreduce(response, m, &tasks);
        break;
      case CollectiveKind::kBroadcast:
        PlanBroadcast(response, m, &tasks);
        break;
      case CollectiveKind::kAllgather:
        m.status = PlanAllgather(m, step.results, &tasks);
        break;
      case CollectiveKind::kReducescatter:
        m.status = PlanReducescatter(response, m, step.results, &tasks);
        break;
      case CollectiveKind::kAlltoall:
        m.status = PlanAlltoall(m, step.results, &tasks);
        break;
      case CollectiveKind::kBarrier:
        break;
      default:
        m.status = absl::InternalError(
            absl::StrCat("the cpu backend cannot run ", CollectiveKindName(response.kind)));
    }
  }
  std::vector<absl::Status> errors(tasks.size());
  auto run = [&](size_t i) { errors[i] = tasks[i](); };
  if (total < parallel_threshold_ || tasks.size() < 2) {
    for (size_t i = 0; i < tasks.size(); ++i) run(i);
  } else {
    pool_->ParallelFor(tasks.size(), run);
  }
  for (const absl::Status& s : errors) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace kolo::daemon
