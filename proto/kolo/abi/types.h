// Element types, reduction operators and collective kinds shared by libkolo,
// kolod and the shared-memory ABI. Values are part of ABI v1: never renumber.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kolo {

enum class DType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kInt32 = 2,
  kInt64 = 3,
  kFloat16 = 4,
  kBFloat16 = 5,
  kFloat32 = 6,
  kFloat64 = 7,
  kInt16 = 8,
  // One byte per element: a byte that is not zero is true. Reductions read
  // it so and write only 0 or 1; sum and max are a logical or, product and
  // min a logical and; it has no average and takes no scale factor.
  kBool = 9,
  kUint16 = 10,
};
inline constexpr uint32_t kNumDTypes = 11;

enum class ReduceOp : uint32_t {
  kSum = 0,
  kAverage = 1,
  kMin = 2,
  kMax = 3,
  kProduct = 4,
  // Adaptive summation (Maleki et al., "Scaling Distributed Training with
  // Adaptive Summation"): the ranks' tensors are combined pairwise in a
  // binary tree, a pair (a, b) giving
  //   (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b
  // (a coefficient is 1 where its norm is 0), each tensor of a fused or
  // grouped call on its own. Floating-point tensors only.
  // daemon/algorithms/adasum.h says which tree.
  kAdasum = 5,
};
inline constexpr uint32_t kNumReduceOps = 6;

enum class CollectiveKind : uint32_t {
  kAllreduce = 1,
  kBroadcast = 2,
  kAllgather = 3,
  kReducescatter = 4,
  kAlltoall = 5,
  kBarrier = 6,
  kJoin = 7,
  kAddProcessSet = 8,
  kRemoveProcessSet = 9,
};
inline constexpr uint32_t kMaxCollectiveKind = 9;
// What each kind is (its name, whether it returns a result, fuses, ...):
// proto/kolo/abi/collective_traits.h.

// How float32 allreduce data travels: as is, or rounded to 16 bits (each
// rank's input is rounded, the reduction accumulates in float32 and the
// result is rounded once more), halving the bytes moved between nodes.
enum class Compression : uint32_t { kNone = 0, kFloat16 = 1, kBFloat16 = 2 };
inline constexpr uint32_t kNumCompressions = 3;

// Bytes of one element; 0 for a value outside the enum.
constexpr size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kUint8:
    case DType::kInt8:
    case DType::kBool:
      return 1;
    case DType::kInt16:
    case DType::kUint16:
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
    case DType::kInt32:
    case DType::kFloat32:
      return 4;
    case DType::kInt64:
    case DType::kFloat64:
      return 8;
  }
  return 0;
}

constexpr bool IsFloatingPoint(DType t) {
  return t == DType::kFloat16 || t == DType::kBFloat16 || t == DType::kFloat32 ||
         t == DType::kFloat64;
}

// Whether a reduction of `t` may use `op` (bool has no average), and whether
// values of `t` may be multiplied by a scale factor other than 1 (not bool).
constexpr bool ReducesWith(DType t, ReduceOp op) {
  if (op == ReduceOp::kAdasum) return IsFloatingPoint(t);
  return t != DType::kBool || op != ReduceOp::kAverage;
}
// The ops ReducesWith accepts for `t`, for error messages.
constexpr const char* ReduceOpsOf(DType t) {
  if (t == DType::kBool) return "sum, min, max, product";
  if (IsFloatingPoint(t)) return "sum, average, min, max, product, adasum";
  return "sum, average, min, max, product";
}
constexpr bool Scalable(DType t) { return t != DType::kBool; }

constexpr const char* DTypeName(DType t) {
  switch (t) {
    case DType::kUint8:
      return "uint8";
    case DType::kInt8:
      return "int8";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kFloat32:
      return "float32";
    case DType::kFloat64:
      return "float64";
    case DType::kInt16:
      return "int16";
    case DType::kBool:
      return "bool";
    case DType::kUint16:
      return "uint16";
  }
  return "invalid-dtype";
}

constexpr const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAverage:
      return "average";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kProduct:
      return "product";
    case ReduceOp::kAdasum:
      return "adasum";
  }
  return "invalid-op";
}

}  // namespace kolo
