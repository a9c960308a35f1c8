// Helpers for the GPU kernel tests: an owning device array, random data of
// every Kolo element type, and a comparison against the CPU reference that
// accepts any NaN for a NaN.
//
// Thread-safety: not thread-safe; one test thread.
#pragma once

#include <cuda_runtime.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/half.h"
#include "proto/kolo/abi/types.h"

namespace kolo::kernels::cuda::testing {

// Skips the current test where no GPU is usable.
#define KOLO_REQUIRE_GPU()                                                         \
  do {                                                                             \
    int kolo_devices_ = 0;                                                         \
    if (cudaGetDeviceCount(&kolo_devices_) != cudaSuccess || kolo_devices_ == 0) { \
      GTEST_SKIP() << "no CUDA device";                                            \
    }                                                                              \
  } while (0)

// Device memory of `bytes`, freed on destruction. Move-only.
class DeviceBytes {
 public:
  explicit DeviceBytes(size_t bytes) : bytes_(bytes) {
    EXPECT_EQ(cudaMalloc(&ptr_, bytes == 0 ? 1 : bytes), cudaSuccess);
  }
  DeviceBytes(DeviceBytes&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  ~DeviceBytes() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  uint8_t* get() const { return static_cast<uint8_t*>(ptr_); }
  void Upload(const void* host, size_t bytes, size_t offset = 0) {
    ASSERT_EQ(cudaMemcpy(get() + offset, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
  }
  void Download(void* host, size_t bytes, size_t offset = 0) const {
    ASSERT_EQ(cudaMemcpy(host, get() + offset, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
};

inline const DType kAllDTypes[] = {DType::kUint8,   DType::kInt8,     DType::kInt16,
                                   DType::kUint16,  DType::kInt32,    DType::kInt64,
                                   DType::kFloat16, DType::kBFloat16, DType::kFloat32,
                                   DType::kFloat64, DType::kBool};

// `count` random elements of `dtype` as bytes. Floats are small values of
// both signs (so products of a few stay finite); with `with_nan`, about one
// in 97 is a NaN. Integers cover their whole range for sums (wrapping is
// tested) and small values otherwise. bool is false (0) or true as any byte
// 1..255, half and half.
inline std::vector<uint8_t> RandomElements(DType dtype, size_t count, std::mt19937_64& rng,
                                           bool with_nan = false, bool small_ints = false) {
  const size_t esize = DTypeSize(dtype);
  std::vector<uint8_t> out(count * esize);
  std::uniform_real_distribution<float> real(-4.0f, 4.0f);
  for (size_t i = 0; i < count; ++i) {
    uint8_t* p = out.data() + i * esize;
    const bool nan = with_nan && rng() % 97 == 0;
    const float f = nan ? std::nanf("") : real(rng);
    switch (dtype) {
      case DType::kFloat32:
        std::memcpy(p, &f, 4);
        break;
      case DType::kFloat64: {
        const double d = nan ? std::nan("") : static_cast<double>(real(rng)) + 1e-9 * real(rng);
        std::memcpy(p, &d, 8);
        break;
      }
      case DType::kFloat16: {
        const uint16_t h = FloatToHalf(f);
        std::memcpy(p, &h, 2);
        break;
      }
      case DType::kBFloat16: {
        const uint16_t h = FloatToBFloat16(f);
        std::memcpy(p, &h, 2);
        break;
      }
      case DType::kBool:
        *p = rng() % 2 == 0 ? 0 : static_cast<uint8_t>(1 + rng() % 255);
        break;
      default: {
        uint64_t v = rng();
        if (small_ints) v = static_cast<uint64_t>(static_cast<int64_t>(rng() % 7) - 3);
        std::memcpy(p, &v, esize);
        break;
      }
    }
  }
  return out;
}

// Element `i` of a byte array of `dtype`, as a double (16-bit floats
// widened, a bool as its byte).
inline double ElementAsDouble(DType dtype, const uint8_t* data, size_t i) {
  const uint8_t* p = data + i * DTypeSize(dtype);
  switch (dtype) {
    case DType::kUint8:
      return *p;
    case DType::kInt8:
      return static_cast<int8_t>(*p);
    case DType::kBool:
      return *p;
    case DType::kInt16: {
      int16_t v;
      std::memcpy(&v, p, 2);
      return v;
    }
    case DType::kUint16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return v;
    }
    case DType::kInt32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::kInt64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
    case DType::kFloat16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return HalfToFloat(v);
    }
    case DType::kBFloat16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return BFloat16ToFloat(v);
    }
    case DType::kFloat32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::kFloat64: {
      double v;
      std::memcpy(&v, p, 8);
      return v;
    }
  }
  return 0;
}

// Expects `got` to equal `want` element for element: bit-exact for
// integers and bool, equal values (any NaN matching any NaN, -0 matching +0) for
// floats. Reports the first few differences.
inline void ExpectSameElements(DType dtype, const std::vector<uint8_t>& want,
                               const std::vector<uint8_t>& got, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  const size_t n = want.size() / DTypeSize(dtype);
  int reported = 0;
  for (size_t i = 0; i < n && reported < 5; ++i) {
    const double w = ElementAsDouble(dtype, want.data(), i);
    const double g = ElementAsDouble(dtype, got.data(), i);
    const bool same = IsFloatingPoint(dtype)
                          ? ((std::isnan(w) && std::isnan(g)) || w == g)
                          : std::memcmp(want.data() + i * DTypeSize(dtype),
                                        got.data() + i * DTypeSize(dtype), DTypeSize(dtype)) == 0;
    if (!same) {
      ADD_FAILURE() << what << ": element " << i << " of " << n << " is " << g
                    << ", the CPU reference gives " << w;
      ++reported;
    }
  }
}

}  // namespace kolo::kernels::cuda::testing
