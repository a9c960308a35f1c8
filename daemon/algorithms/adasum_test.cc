#include "daemon/algorithms/adasum.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "daemon/algorithms/collective_test_util.h"
#include "daemon/transport/in_process_transport.h"
#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

constexpr uint64_t kTagBase = uint64_t{9} << 24;

// The definition, written plainly in double: a pair's combination, and the
// tree of adasum.h over operands in order.
std::vector<double> Pair(const std::vector<double>& a, const std::vector<double>& b,
                         const std::vector<size_t>& ends) {
  std::vector<double> out(a.size());
  size_t begin = 0;
  for (size_t end : ends) {
    double dot = 0, aa = 0, bb = 0;
    for (size_t i = begin; i < end; ++i) {
      dot += a[i] * b[i];
      aa += a[i] * a[i];
      bb += b[i] * b[i];
    }
    const double ca = aa > 0 ? 1 - dot / (2 * aa) : 1, cb = bb > 0 ? 1 - dot / (2 * bb) : 1;
    for (size_t i = begin; i < end; ++i) out[i] = ca * a[i] + cb * b[i];
    begin = end;
  }
  return out;
}

std::vector<double> Tree(std::vector<std::vector<double>> v, const std::vector<size_t>& ends) {
  size_t p = 1;
  while (p * 2 <= v.size()) p *= 2;
  const size_t extra = v.size() - p;
  std::vector<std::vector<double>> level;
  for (size_t i = 0; i < extra; ++i) level.push_back(Pair(v[2 * i], v[2 * i + 1], ends));
  for (size_t i = 2 * extra; i < v.size(); ++i) level.push_back(v[i]);
  while (level.size() > 1) {
    std::vector<std::vector<double>> next;
    for (size_t i = 0; i < level.size(); i += 2) next.push_back(Pair(level[i], level[i + 1], ends));
    level = std::move(next);
  }
  return level[0];
}

// Node i's operand: values that differ per node and per element, some
// tensors zero on some nodes (a joined rank's).
std::vector<double> Operand(int node, size_t count, const std::vector<size_t>& ends) {
  std::vector<double> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = std::sin(0.37 * i + 1.3 * node) + 0.25 * node;
  if (node == 1 && ends.size() > 1) std::fill(v.begin(), v.begin() + ends[0], 0.0);
  return v;
}

template <typename T>
std::vector<T> Cast(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

struct Case {
  size_t count;
  std::vector<size_t> ends;
};

std::vector<Case> Cases() {
  return {{0, {0}}, {1, {1}}, {7, {7}}, {5, {2, 2, 5}}, {1000, {1000}},
          {1000, {10, 500, 999, 1000}}, {100003, {3, 70000, 100003}}};
}

class AdasumAllreduceTest : public testing::TestWithParam<int> {};

TEST_P(AdasumAllreduceTest, MatchesTheTreeOnEveryNodeBitForBit) {
  const int n = GetParam();
  for (const Case& c : Cases()) {
    SCOPED_TRACE(absl::StrFormat("%d nodes, count %d, %d tensors", n, c.count, c.ends.size()));
    std::vector<std::vector<double>> operands;
    for (int i = 0; i < n; ++i) operands.push_back(Operand(i, c.count, c.ends));
    const std::vector<double> want = Tree(operands, c.ends);
    for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
      InProcessFabric fabric(n);
      std::vector<std::vector<double>> f64 = operands;
      std::vector<std::vector<float>> f32;
      for (const auto& o : operands) f32.push_back(Cast<float>(o));
      const absl::Time deadline = absl::Now() + absl::Seconds(60);
      std::vector<absl::Status> results = RunOnNodes(n, [&](int i) {
        void* buf = dtype == DType::kFloat64 ? static_cast<void*>(f64[i].data())
                                              : static_cast<void*>(f32[i].data());
        return AdasumAllreduce(fabric.endpoint(i), buf, c.count, dtype, c.ends, kTagBase,
                               deadline);
      });
      for (int i = 0; i < n; ++i) {
        ASSERT_TRUE(results[i].ok()) << "node " << i << ": " << results[i];
        if (dtype == DType::kFloat64) {
          ASSERT_EQ(f64[i], f64[0]) << "node " << i << " differs from node 0";
        } else {
          ASSERT_EQ(f32[i], f32[0]) << "node " << i << " differs from node 0";
        }
      }
      const double tolerance = dtype == DType::kFloat64 ? 1e-12 : 1e-5;
      for (size_t k = 0; k < c.count; ++k) {
        const double got = dtype == DType::kFloat64 ? f64[0][k] : f32[0][k];
        ASSERT_NEAR(got, want[k], tolerance * (1 + std::abs(want[k]))) << DTypeName(dtype)
                                                                        << " element " << k;
      }
      EXPECT_EQ(fabric.outstanding(), 0u);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Nodes, AdasumAllreduceTest, testing::Values(1, 2, 3, 4, 5, 6, 7, 8),
                         [](const testing::TestParamInfo<int>& info) {
                           return absl::StrFormat("Nodes%d", info.param);
                         });

TEST(AdasumTreeTest, MatchesTheDefinitionForOneToNineOperands) {
  const std::vector<size_t> ends = {333};
  for (int n = 1; n <= 9; ++n) {
    std::vector<std::vector<double>> operands;
    std::vector<const void*> inputs;
    for (int i = 0; i < n; ++i) operands.push_back(Operand(i, 333, ends));
    for (const auto& o : operands) inputs.push_back(o.data());
    std::vector<double> out(333);
    ASSERT_TRUE(AdasumTree(DType::kFloat64, inputs, out.data(), 333, 0.5).ok());
    std::vector<double> want = Tree(operands, ends);
    for (size_t k = 0; k < 333; ++k) EXPECT_NEAR(out[k], 0.5 * want[k], 1e-12) << n << " " << k;
    // The inputs are left as they were, and out may be one of them.
    EXPECT_EQ(operands[0], Operand(0, 333, ends));
    ASSERT_TRUE(AdasumTree(DType::kFloat64, inputs, operands[0].data(), 333).ok());
    for (size_t k = 0; k < 333; ++k) EXPECT_NEAR(operands[0][k], want[k], 1e-12);
  }
}

TEST(AdasumTreeTest, OrthogonalOperandsAddAndEqualOnesAverage) {
  const std::vector<float> a = {1, 0}, b = {0, 1};
  std::vector<float> out(2);
  const void* pair[] = {a.data(), b.data()};
  ASSERT_TRUE(AdasumTree(DType::kFloat32, pair, out.data(), 2).ok());
  EXPECT_EQ(out, (std::vector<float>{1, 1}));
  const void* same[] = {a.data(), a.data(), a.data(), a.data()};
  ASSERT_TRUE(AdasumTree(DType::kFloat32, same, out.data(), 2).ok());
  EXPECT_EQ(out, a);
}

TEST(AdasumTest, RefusesWhatItCannotCombine) {
  int32_t x[2] = {1, 2};
  const void* in[] = {x, x};
  EXPECT_EQ(AdasumTree(DType::kInt32, in, x, 2).code(), absl::StatusCode::kInvalidArgument);
  InProcessFabric fabric(2);
  std::vector<float> buf(4);
  const std::vector<size_t> bad_ends = {3};
  const absl::Status s = AdasumAllreduce(fabric.endpoint(0), buf.data(), 4, DType::kFloat32,
                                         bad_ends, kTagBase, absl::Now() + absl::Seconds(5));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("tensor ends"), absl::string_view::npos) << s;
  const std::vector<size_t> unsorted = {3, 1, 4};
  EXPECT_EQ(AdasumAllreduce(fabric.endpoint(0), buf.data(), 4, DType::kFloat32, unsorted,
                            kTagBase, absl::Now() + absl::Seconds(5))
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kolo::daemon
