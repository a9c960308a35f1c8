#include "daemon/algorithms/collective_test_util.h"

#include <cstdint>
#include <cstring>
#include <thread>

#include "kernels/cpu/half.h"
#include "kernels/cpu/reduce.h"

namespace kolo::daemon {
namespace {

template <typename T>
void Put(std::byte* out, size_t i, T v) {
  std::memcpy(out + i * sizeof(T), &v, sizeof(T));
}

}  // namespace

std::vector<std::byte> TestData(DType dtype, ReduceOp op, int node, size_t count) {
  std::vector<std::byte> out(count * DTypeSize(dtype));
  for (size_t k = 0; k < count; ++k) {
    int v;
    switch (op) {
      case ReduceOp::kProduct: {
        static constexpr int kFactors[] = {1, 2, -1, -2, 1};
        v = kFactors[(k * 3 + node * 5 + k / 7) % 5];
        break;
      }
      case ReduceOp::kMin:
      case ReduceOp::kMax:
        v = static_cast<int>((node * 31 + k * 17 + k / 5) % 201) - 100;
        break;
      default:
        v = static_cast<int>((node * 7 + k * 13 + k / 11) % 7) - 3;
        break;
    }
    std::byte* o = out.data();
    switch (dtype) {
      case DType::kUint8:
        Put(o, k, static_cast<uint8_t>(v));
        break;
      case DType::kInt8:
        Put(o, k, static_cast<int8_t>(v));
        break;
      case DType::kInt32:
        Put(o, k, static_cast<int32_t>(v));
        break;
      case DType::kInt64:
        Put(o, k, static_cast<int64_t>(v));
        break;
      case DType::kFloat16:
        Put(o, k, kernels::FloatToHalf(static_cast<float>(v)));
        break;
      case DType::kBFloat16:
        Put(o, k, kernels::FloatToBFloat16(static_cast<float>(v)));
        break;
      case DType::kFloat32:
        Put(o, k, static_cast<float>(v));
        break;
      case DType::kFloat64:
        Put(o, k, static_cast<double>(v));
        break;
      case DType::kInt16:
        Put(o, k, static_cast<int16_t>(v));
        break;
      case DType::kUint16:
        // Negative v wraps (as for uint8): exact in modular arithmetic.
        Put(o, k, static_cast<uint16_t>(v));
        break;
      case DType::kBool:
        // True as the byte of v (1..255 for v != 0), not only as 1.
        Put(o, k, static_cast<uint8_t>(v));
        break;
    }
  }
  return out;
}

std::vector<std::byte> SerialReference(DType dtype, ReduceOp op, int nodes, size_t count) {
  std::vector<std::vector<std::byte>> inputs;
  std::vector<const void*> srcs;
  for (int i = 0; i < nodes; ++i) {
    inputs.push_back(TestData(dtype, op, i, count));
    srcs.push_back(inputs.back().data());
  }
  std::vector<std::byte> out(count * DTypeSize(dtype));
  if (count == 0) return out;
  void* dsts[1] = {out.data()};
  absl::Status s = kernels::Reduce(dtype, op, srcs, dsts, count);
  if (!s.ok()) out.clear();  // makes every comparison fail
  return out;
}

std::vector<absl::Status> RunOnNodes(int nodes, const std::function<absl::Status(int)>& fn) {
  std::vector<absl::Status> results(nodes);
  std::vector<std::thread> threads;
  for (int i = 0; i < nodes; ++i) {
    threads.emplace_back([&, i] { results[i] = fn(i); });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

}  // namespace kolo::daemon
