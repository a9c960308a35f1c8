#include "common/reduction_rule.h"

#include "gtest/gtest.h"

namespace kolo {
namespace {

absl::Status Check(CollectiveKind kind, DType dtype, ReduceOp op, double prescale = 1.0,
                   Compression c = Compression::kNone, bool device = false) {
  return CheckReductionArgs(kind, "g", dtype, op, prescale, 1.0, c, device);
}

TEST(ReductionRuleTest, AcceptsEveryOpTheDtypeTakes) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                      ReduceOp::kProduct, ReduceOp::kAdasum}) {
    EXPECT_TRUE(Check(CollectiveKind::kAllreduce, DType::kFloat32, op).ok()) << ReduceOpName(op);
  }
  EXPECT_TRUE(Check(CollectiveKind::kAllreduce, DType::kFloat16, ReduceOp::kAdasum, 0.5).ok());
  EXPECT_TRUE(Check(CollectiveKind::kAllreduce, DType::kBool, ReduceOp::kMax).ok());
  EXPECT_TRUE(Check(CollectiveKind::kReducescatter, DType::kInt32, ReduceOp::kAverage).ok());
}

TEST(ReductionRuleTest, RefusesEachBreakWithOneMessage) {
  struct Case {
    absl::Status status;
    const char* message;
  } cases[] = {
      {Check(CollectiveKind::kAllreduce, DType::kBool, ReduceOp::kAverage),
       "allreduce \"g\": bool has no average (sum, min, max, product)"},
      {Check(CollectiveKind::kAllreduce, DType::kInt32, ReduceOp::kAdasum),
       "allreduce \"g\": int32 has no adasum (sum, average, min, max, product)"},
      {Check(CollectiveKind::kAllreduce, DType::kBool, ReduceOp::kSum, 2.0),
       "allreduce \"g\": bool takes no scale factor (prescale 2, postscale 1)"},
      {Check(CollectiveKind::kReducescatter, DType::kFloat32, ReduceOp::kMax),
       "reducescatter \"g\": op max (only sum and average)"},
      {Check(CollectiveKind::kReducescatter, DType::kFloat32, ReduceOp::kAdasum),
       "reducescatter \"g\": op adasum (only sum and average)"},
      {Check(CollectiveKind::kAllreduce, DType::kFloat32, ReduceOp::kAdasum, 1.0,
             Compression::kFloat16),
       "allreduce \"g\": adasum takes no compression"},
      {Check(CollectiveKind::kAllreduce, DType::kFloat32, ReduceOp::kAdasum, 1.0,
             Compression::kNone, /*device=*/true),
       "allreduce \"g\": adasum runs on host tensors only"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(c.status.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_NE(c.status.message().find(c.message), absl::string_view::npos)
        << c.status.message() << " lacks " << c.message;
  }
}

}  // namespace
}  // namespace kolo
