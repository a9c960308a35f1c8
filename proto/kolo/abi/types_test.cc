#include "proto/kolo/abi/types.h"

#include <cstdint>
#include <set>
#include <string>

#include "gtest/gtest.h"

namespace kolo {
namespace {

// The values are ABI v1: a client and kolod built apart must agree on them.
static_assert(static_cast<uint32_t>(DType::kFloat64) == 7);
static_assert(static_cast<uint32_t>(DType::kInt16) == 8);
static_assert(static_cast<uint32_t>(DType::kBool) == 9);
static_assert(static_cast<uint32_t>(DType::kUint16) == 10);
static_assert(kNumDTypes == 11);

TEST(DTypeTest, EveryDTypeHasASizeAndADistinctName) {
  std::set<std::string> names;
  for (uint32_t t = 0; t < kNumDTypes; ++t) {
    const DType d = static_cast<DType>(t);
    EXPECT_NE(DTypeSize(d), 0u) << t;
    EXPECT_STRNE(DTypeName(d), "invalid-dtype") << t;
    names.insert(DTypeName(d));
  }
  EXPECT_EQ(names.size(), kNumDTypes);
  EXPECT_EQ(DTypeSize(static_cast<DType>(kNumDTypes)), 0u);
  EXPECT_STREQ(DTypeName(static_cast<DType>(kNumDTypes)), "invalid-dtype");
}

TEST(DTypeTest, Int16AndBool) {
  EXPECT_EQ(DTypeSize(DType::kInt16), 2u);
  EXPECT_EQ(DTypeSize(DType::kBool), 1u);
  EXPECT_STREQ(DTypeName(DType::kInt16), "int16");
  EXPECT_STREQ(DTypeName(DType::kBool), "bool");
  EXPECT_FALSE(IsFloatingPoint(DType::kInt16));
  EXPECT_FALSE(IsFloatingPoint(DType::kBool));
}

TEST(DTypeTest, Uint16) {
  EXPECT_EQ(DTypeSize(DType::kUint16), 2u);
  EXPECT_STREQ(DTypeName(DType::kUint16), "uint16");
  EXPECT_FALSE(IsFloatingPoint(DType::kUint16));
  EXPECT_TRUE(Scalable(DType::kUint16));
  EXPECT_TRUE(ReducesWith(DType::kUint16, ReduceOp::kAverage));
}

TEST(DTypeTest, BoolHasNoAverageAndNoScaling) {
  for (uint32_t t = 0; t < kNumDTypes; ++t) {
    const DType d = static_cast<DType>(t);
    const bool is_bool = d == DType::kBool;
    EXPECT_EQ(Scalable(d), !is_bool) << DTypeName(d);
    EXPECT_EQ(ReducesWith(d, ReduceOp::kAverage), !is_bool) << DTypeName(d);
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
      EXPECT_TRUE(ReducesWith(d, op)) << DTypeName(d) << " " << ReduceOpName(op);
    }
  }
}

}  // namespace
}  // namespace kolo
