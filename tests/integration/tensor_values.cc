#include "tests/integration/tensor_values.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/half.h"

namespace kolo::testing {

double InputValue(ReduceOp op, int rank, int64_t i) {
  if (op == ReduceOp::kProduct) return ((rank + i) % 2) + 1;  // 1 or 2
  return static_cast<double>((rank * 7 + i * 3) % 11) - ((i % 4 == 0) ? 5 : 0);
}

double Clamp(DType t, double v) {
  if (t == DType::kUint8 || t == DType::kUint16) return std::fabs(v);
  if (t == DType::kBool) return v != 0 ? 1 : 0;
  return v;
}

void Store(DType t, void* base, int64_t i, double v) {
  switch (t) {
    case DType::kUint8:
      static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(v);
      break;
    case DType::kInt8:
      static_cast<int8_t*>(base)[i] = static_cast<int8_t>(v);
      break;
    case DType::kInt32:
      static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v);
      break;
    case DType::kInt64:
      static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v);
      break;
    case DType::kFloat16:
      static_cast<uint16_t*>(base)[i] = kolo::kernels::FloatToHalf(static_cast<float>(v));
      break;
    case DType::kBFloat16:
      static_cast<uint16_t*>(base)[i] = kolo::kernels::FloatToBFloat16(static_cast<float>(v));
      break;
    case DType::kFloat32:
      static_cast<float*>(base)[i] = static_cast<float>(v);
      break;
    case DType::kFloat64:
      static_cast<double*>(base)[i] = v;
      break;
    case DType::kInt16:
      static_cast<int16_t*>(base)[i] = static_cast<int16_t>(v);
      break;
    case DType::kUint16:
      static_cast<uint16_t*>(base)[i] = static_cast<uint16_t>(v);
      break;
    case DType::kBool:
      static_cast<uint8_t*>(base)[i] = v != 0 ? static_cast<uint8_t>(1 + (i * 37) % 255) : 0;
      break;
  }
}

double Load(DType t, const void* base, int64_t i) {
  switch (t) {
    case DType::kUint8:
      return static_cast<const uint8_t*>(base)[i];
    case DType::kInt8:
      return static_cast<const int8_t*>(base)[i];
    case DType::kInt32:
      return static_cast<const int32_t*>(base)[i];
    case DType::kInt64:
      return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case DType::kFloat16:
      return kolo::kernels::HalfToFloat(static_cast<const uint16_t*>(base)[i]);
    case DType::kBFloat16:
      return kolo::kernels::BFloat16ToFloat(static_cast<const uint16_t*>(base)[i]);
    case DType::kFloat32:
      return static_cast<const float*>(base)[i];
    case DType::kFloat64:
      return static_cast<const double*>(base)[i];
    case DType::kInt16:
      return static_cast<const int16_t*>(base)[i];
    case DType::kUint16:
      return static_cast<const uint16_t*>(base)[i];
    case DType::kBool:
      return static_cast<const uint8_t*>(base)[i] != 0 ? 1 : 0;
  }
  return 0;
}

bool Canonical(DType t, const void* base, int64_t i) {
  return t != DType::kBool || static_cast<const uint8_t*>(base)[i] <= 1;
}

double Expected(DType t, ReduceOp op, int size, int64_t i) {
  double acc = Clamp(t, InputValue(op, 0, i));
  for (int r = 1; r < size; ++r) {
    double v = Clamp(t, InputValue(op, r, i));
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage:
        acc = t == DType::kBool ? std::max(acc, v) : acc + v;
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
      case ReduceOp::kProduct:
        acc *= v;
        break;
      case ReduceOp::kAdasum:
        // Not elementwise: a NaN, so that no result ever checks against it.
        return std::nan("");
    }
  }
  if (op == ReduceOp::kAverage) {
    acc /= size;
    if (!kolo::IsFloatingPoint(t)) acc = std::trunc(acc);
  }
  return acc;
}

bool Close(DType t, double got, double want) {
  double tol = 0;
  if (t == DType::kFloat16) tol = 1e-3 * std::max(1.0, std::fabs(want));
  if (t == DType::kBFloat16) tol = 8e-3 * std::max(1.0, std::fabs(want));
  if (t == DType::kFloat32) tol = 1e-6 * std::max(1.0, std::fabs(want));
  if (t == DType::kFloat64) tol = 1e-12 * std::max(1.0, std::fabs(want));
  return std::fabs(got - want) <= tol;
}

}  // namespace kolo::testing
