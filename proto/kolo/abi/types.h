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
};
inline constexpr uint32_t kNumDTypes = 8;

enum class ReduceOp : uint32_t {
  kSum = 0,
  kAverage = 1,
  kMin = 2,
  kMax = 3,
  kProduct = 4,
};
inline constexpr uint32_t kNumReduceOps = 5;

enum class CollectiveKind : uint32_t {
  kAllreduce = 1,
  kBroadcast = 2,
};

// Bytes of one element; 0 for a value outside the enum.
constexpr size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kUint8:
    case DType::kInt8:
      return 1;
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
  return t == DType::kFloat16 || t == DType::kBFloat16 ||
         t == DType::kFloat32 || t == DType::kFloat64;
}

constexpr const char* DTypeName(DType t) {
  switch (t) {
    case DType::kUint8: return "uint8";
    case DType::kInt8: return "int8";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
  }
  return "invalid-dtype";
}

constexpr const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAverage: return "average";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kProduct: return "product";
  }
  return "invalid-op";
}

constexpr const char* CollectiveKindName(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::kAllreduce: return "allreduce";
    case CollectiveKind::kBroadcast: return "broadcast";
  }
  return "invalid-collective";
}

}  // namespace kolo
