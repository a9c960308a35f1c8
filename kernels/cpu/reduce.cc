// Argument checking and routing for reduce.h. The kernels themselves live in
// reduce_float.cc (SIMD) and reduce_int.cc (integers and bool).

#include "kernels/cpu/reduce.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "kernels/cpu/reduce_internal.h"
#include "proto/kolo/abi/types.h"

namespace kolo::kernels {
namespace {

struct ByteRange {
  uintptr_t begin;
  uintptr_t end;
};

bool PartiallyOverlap(ByteRange a, ByteRange b) {
  return a.begin != b.begin && a.begin < b.end && b.begin < a.end;
}

absl::Status CheckPointer(const void* p, size_t elem_size, const char* role, size_t index) {
  if (p == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(role, "[", index, "] is null"));
  }
  if (reinterpret_cast<uintptr_t>(p) % elem_size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(role, "[", index, "] = ", absl::Hex(reinterpret_cast<uintptr_t>(p)),
                     " is not aligned to its ", elem_size, "-byte element"));
  }
  return absl::OkStatus();
}

// Everything Reduce() promises to reject, checked before anything is written.
absl::Status Validate(DType dtype, ReduceOp op, absl::Span<const void* const> srcs,
                      absl::Span<void* const> dsts, size_t count, double prescale,
                      double postscale) {
  const size_t elem_size = DTypeSize(dtype);
  if (elem_size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("reduce: invalid dtype ", static_cast<uint32_t>(dtype)));
  }
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMin:
    case ReduceOp::kMax:
    case ReduceOp::kProduct:
      break;
    case ReduceOp::kAverage:
      return absl::InvalidArgumentError(
          "reduce: op average is not a kernel op; reduce with sum and fold 1/n "
          "into postscale");
    case ReduceOp::kAdasum:
      return absl::InvalidArgumentError(
          "reduce: op adasum is not elementwise; its kernels are kernels/cpu/adasum.h");
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("reduce: invalid op ", static_cast<uint32_t>(op)));
  }
  if (!Scalable(dtype) && (prescale != 1.0 || postscale != 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat("reduce: ", DTypeName(dtype),
                                                   " takes no scale factor (prescale ", prescale,
                                                   ", postscale ", postscale, ")"));
  }
  if (srcs.empty() || dsts.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("reduce: needs at least one source and one destination, got ", srcs.size(),
                     " and ", dsts.size()));
  }
  if (count > std::numeric_limits<size_t>::max() / elem_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("reduce: count ", count, " of ", std::string(DTypeName(dtype)), " overflows"));
  }
  if (count == 0) return absl::OkStatus();
  const size_t bytes = count * elem_size;
  auto range = [bytes](const void* p) {
    const uintptr_t begin = reinterpret_cast<uintptr_t>(p);
    return ByteRange{begin, begin + bytes};
  };
  for (size_t i = 0; i < srcs.size(); ++i) {
    if (absl::Status s = CheckPointer(srcs[i], elem_size, "src", i); !s.ok()) return s;
  }
  for (size_t i = 0; i < dsts.size(); ++i) {
    if (absl::Status s = CheckPointer(dsts[i], elem_size, "dst", i); !s.ok()) return s;
    for (size_t j = 0; j < srcs.size(); ++j) {
      if (PartiallyOverlap(range(dsts[i]), range(srcs[j]))) {
        return absl::InvalidArgumentError(
            absl::StrCat("reduce: dst[", i, "] partially overlaps src[", j, "] (", bytes,
                         " bytes each); only an exact alias is allowed"));
      }
    }
    for (size_t j = 0; j < i; ++j) {
      if (PartiallyOverlap(range(dsts[i]), range(dsts[j]))) {
        return absl::InvalidArgumentError(absl::StrCat(
            "reduce: dst[", i, "] partially overlaps dst[", j, "] (", bytes, " bytes each)"));
      }
    }
  }
  return absl::OkStatus();
}

void CopyToAll(const void* src, absl::Span<void* const> dsts, size_t bytes) {
  for (void* dst : dsts) {
    if (dst != src) std::memcpy(dst, src, bytes);
  }
}

}  // namespace

absl::Status Reduce(DType dtype, ReduceOp op, absl::Span<const void* const> srcs,
                    absl::Span<void* const> dsts, size_t count, double prescale, double postscale) {
  if (absl::Status s = Validate(dtype, op, srcs, dsts, count, prescale, postscale); !s.ok()) {
    return s;
  }
  if (count == 0) return absl::OkStatus();
  if (srcs.size() == 1 && prescale == 1.0 && postscale == 1.0 && dtype != DType::kBool) {
    // Every op over one source is the identity: copy, keeping every bit
    // (bool is not copied: its result bytes are 0 or 1 whatever came in).
    CopyToAll(srcs[0], dsts, count * DTypeSize(dtype));
    return absl::OkStatus();
  }
  const internal::ReduceArgs args{
      .dtype = dtype,
      .op = op,
      .srcs = srcs.data(),
      .num_srcs = srcs.size(),
      .dsts = dsts.data(),
      .num_dsts = dsts.size(),
      .count = count,
      .prescale = prescale,
      .postscale = postscale,
  };
  if (dtype == DType::kBool) {
    internal::ReduceBool(args);
  } else if (IsFloatingPoint(dtype)) {
    internal::ReduceFloat(args);
  } else {
    internal::ReduceInteger(args);
  }
  return absl::OkStatus();
}

absl::Status ScaleCopy(DType dtype, const void* src, absl::Span<void* const> dsts, size_t count,
                       double scale) {
  const void* const srcs[] = {src};
  if (scale == 1.0) {
    // A plain copy of every bit, for every dtype (bool bytes included).
    if (absl::Status s = Validate(dtype, ReduceOp::kSum, srcs, dsts, count, 1.0, 1.0); !s.ok()) {
      return s;
    }
    if (count > 0) CopyToAll(src, dsts, count * DTypeSize(dtype));
    return absl::OkStatus();
  }
  return Reduce(dtype, ReduceOp::kSum, srcs, dsts, count, /*prescale=*/1.0,
                /*postscale=*/scale);
}

}  // namespace kolo::kernels
