#include "kernels/cpu/adasum.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/half.h"

namespace kolo::kernels {
namespace {

// Element access in double for each floating-point dtype.
struct F16 {
  using Storage = uint16_t;
  static double Load(Storage v) { return HalfToFloat(v); }
  static Storage Store(double v) { return FloatToHalf(static_cast<float>(v)); }
};
struct BF16 {
  using Storage = uint16_t;
  static double Load(Storage v) { return BFloat16ToFloat(v); }
  static Storage Store(double v) { return FloatToBFloat16(static_cast<float>(v)); }
};
struct F32 {
  using Storage = float;
  static double Load(Storage v) { return v; }
  static Storage Store(double v) { return static_cast<float>(v); }
};
struct F64 {
  using Storage = double;
  static double Load(Storage v) { return v; }
  static Storage Store(double v) { return v; }
};

// Runs fn.template operator()<Format>() for the dtype's element format.
template <typename Fn>
absl::Status Dispatch(const char* what, DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat16:
      fn.template operator()<F16>();
      return absl::OkStatus();
    case DType::kBFloat16:
      fn.template operator()<BF16>();
      return absl::OkStatus();
    case DType::kFloat32:
      fn.template operator()<F32>();
      return absl::OkStatus();
    case DType::kFloat64:
      fn.template operator()<F64>();
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": adasum takes floating-point tensors, not ", DTypeName(dtype)));
  }
}

}  // namespace

AdasumCoefficients AdasumCoefficientsOf(const AdasumProducts& p) {
  AdasumCoefficients c;
  if (p.a_norm_sq > 0) c.a = 1.0 - p.dot / (2.0 * p.a_norm_sq);
  if (p.b_norm_sq > 0) c.b = 1.0 - p.dot / (2.0 * p.b_norm_sq);
  return c;
}

absl::Status AdasumAccumulate(DType dtype, const void* a, const void* b, size_t count,
                              AdasumProducts* into) {
  return Dispatch("adasum products", dtype, [&]<typename T>() {
    const auto* x = static_cast<const typename T::Storage*>(a);
    const auto* y = static_cast<const typename T::Storage*>(b);
    double dot = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < count; ++i) {
      const double u = T::Load(x[i]), v = T::Load(y[i]);
      dot += u * v;
      aa += u * u;
      bb += v * v;
    }
    into->dot += dot;
    into->a_norm_sq += aa;
    into->b_norm_sq += bb;
  });
}

absl::Status AdasumCombine(DType dtype, const void* a, const void* b, void* dst, size_t count,
                           AdasumCoefficients c) {
  return Dispatch("adasum combine", dtype, [&]<typename T>() {
    const auto* x = static_cast<const typename T::Storage*>(a);
    const auto* y = static_cast<const typename T::Storage*>(b);
    auto* out = static_cast<typename T::Storage*>(dst);
    for (size_t i = 0; i < count; ++i) {
      out[i] = T::Store(c.a * T::Load(x[i]) + c.b * T::Load(y[i]));
    }
  });
}

absl::Status AdasumScale(DType dtype, void* data, size_t count, double scale) {
  if (scale == 1.0) return Dispatch("adasum scale", dtype, []<typename T>() {});
  return Dispatch("adasum scale", dtype, [&]<typename T>() {
    auto* x = static_cast<typename T::Storage*>(data);
    for (size_t i = 0; i < count; ++i) x[i] = T::Store(scale * T::Load(x[i]));
  });
}

}  // namespace kolo::kernels
