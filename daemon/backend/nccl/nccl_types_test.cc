// Kolo's element types and operators as NCCL's. Needs NCCL's headers and
// library, no GPU.
#include <nccl.h>

#include <string>

#include "daemon/backend/nccl/nccl_communicator.h"
#include "gtest/gtest.h"

namespace kolo::daemon::nccl {
namespace {

TEST(NcclTypesTest, MapsEveryTypeButInt16AndUint16AndRefusesAverage) {
  for (DType t : {DType::kUint8, DType::kInt8, DType::kInt32, DType::kInt64, DType::kFloat16,
                  DType::kBFloat16, DType::kFloat32, DType::kFloat64, DType::kBool}) {
    EXPECT_TRUE(ToNcclType(t).ok()) << DTypeName(t);
  }
  EXPECT_EQ(*ToNcclType(DType::kBool), ncclUint8);
  EXPECT_EQ(ToNcclType(static_cast<DType>(kNumDTypes)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(ToNcclOp(ReduceOp::kAverage).ok());
  EXPECT_EQ(*ToNcclOp(ReduceOp::kMax), ncclMax);
}

TEST(NcclTypesTest, Int16IsUnimplementedByName) {
  const absl::StatusOr<ncclDataType_t> t = ToNcclType(DType::kInt16);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(std::string(t.status().message()).find("int16"), std::string::npos) << t.status();
}

TEST(NcclTypesTest, Uint16IsUnimplementedByName) {
  const absl::StatusOr<ncclDataType_t> t = ToNcclType(DType::kUint16);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(std::string(t.status().message()).find("uint16"), std::string::npos) << t.status();
}

TEST(NcclTypesTest, BoolReducesWithMaxAndMin) {
  EXPECT_EQ(*ToNcclOp(DType::kBool, ReduceOp::kSum), ncclMax);
  EXPECT_EQ(*ToNcclOp(DType::kBool, ReduceOp::kMax), ncclMax);
  EXPECT_EQ(*ToNcclOp(DType::kBool, ReduceOp::kProduct), ncclMin);
  EXPECT_EQ(*ToNcclOp(DType::kBool, ReduceOp::kMin), ncclMin);
  EXPECT_FALSE(ToNcclOp(DType::kBool, ReduceOp::kAverage).ok());
  // Every other type keeps its operator.
  EXPECT_EQ(*ToNcclOp(DType::kUint8, ReduceOp::kSum), ncclSum);
  EXPECT_EQ(*ToNcclOp(DType::kFloat32, ReduceOp::kProduct), ncclProd);
  EXPECT_EQ(*ToNcclOp(DType::kInt8, ReduceOp::kMin), ncclMin);
}

}  // namespace
}  // namespace kolo::daemon::nccl
