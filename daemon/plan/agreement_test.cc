#include "daemon/plan/agreement.h"

#include <optional>
#include <string>

#include "gtest/gtest.h"
#include "proto/kolo/abi/collective_traits.h"

namespace kolo::daemon::plan {
namespace {

TensorDesc Allreduce() {
  TensorDesc d;
  d.kind = CollectiveKind::kAllreduce;
  d.shape = {4, 4};
  d.bytes = 64;
  return d;
}

// The difference between `a` and `b` as one line, or "" when they agree.
std::string Diff(const TensorDesc& a, const TensorDesc& b) {
  std::optional<FieldDifference> d = Difference(a, b);
  if (!d.has_value()) return "";
  return d->field + ": " + d->a + " / " + d->b;
}

TEST(AgreementTest, IdenticalViewsAgree) { EXPECT_EQ(Diff(Allreduce(), Allreduce()), ""); }

TEST(AgreementTest, EveryComparedFieldIsNamedWithBothValues) {
  TensorDesc a = Allreduce();
  TensorDesc b = a;
  b.kind = CollectiveKind::kBroadcast;
  EXPECT_EQ(Diff(a, b), "collective: allreduce / broadcast");
  b = a;
  b.dtype = DType::kFloat16;
  EXPECT_EQ(Diff(a, b), "dtype: float32 / float16");
  b = a;
  b.on_device = true;
  b.device = 2;
  EXPECT_EQ(Diff(a, b), ": a tensor in host memory / a tensor on CUDA device 2");
  b.device = -1;  // a node's view does not know the GPU
  EXPECT_EQ(Diff(a, b), ": a tensor in host memory / a tensor in device memory");
  b = a;
  b.group_size = 3;
  EXPECT_EQ(Diff(a, b), "group size: 0 / 3");
  b = a;
  b.shape = {4, 5};
  EXPECT_EQ(Diff(a, b), "shape: [4,4] / [4,5]");
  b = a;
  b.op = ReduceOp::kMax;
  EXPECT_EQ(Diff(a, b), "op: sum / max");
  b = a;
  b.prescale = 0.5;
  EXPECT_EQ(Diff(a, b), "prescale: 1 / 0.5");
  b = a;
  b.postscale = 2;
  EXPECT_EQ(Diff(a, b), "postscale: 1 / 2");
  b = a;
  b.compression = Compression::kBFloat16;
  EXPECT_EQ(Diff(a, b), "compression: 0 / 2");
  a.kind = b.kind = CollectiveKind::kBroadcast;
  b = a;
  b.root_rank = 3;
  EXPECT_EQ(Diff(a, b), "root rank: 0 / 3");
}

TEST(AgreementTest, FirstDifferenceInRuleOrderIsReported) {
  TensorDesc a = Allreduce();
  TensorDesc b = a;
  b.shape = {8};
  b.op = ReduceOp::kMin;
  b.dtype = DType::kInt32;
  EXPECT_EQ(Diff(a, b), "dtype: float32 / int32");
}

TEST(AgreementTest, GpusOfRanksAreNotCompared) {
  TensorDesc a = Allreduce();
  a.on_device = true;
  a.device = 0;
  TensorDesc b = a;
  b.device = 1;
  EXPECT_EQ(Diff(a, b), "");
}

TEST(AgreementTest, FieldsThatDoNotApplyToTheKindAreNotCompared) {
  // Broadcast ignores op, scale factors and compression.
  TensorDesc a = Allreduce();
  a.kind = CollectiveKind::kBroadcast;
  TensorDesc b = a;
  b.op = ReduceOp::kMax;
  b.prescale = 3;
  b.compression = Compression::kFloat16;
  EXPECT_EQ(Diff(a, b), "");
  // Allreduce ignores the root; barrier ignores op and root.
  a = Allreduce();
  b = a;
  b.root_rank = 1;
  EXPECT_EQ(Diff(a, b), "");
  a.kind = b.kind = CollectiveKind::kBarrier;
  b.op = ReduceOp::kMax;
  EXPECT_EQ(Diff(a, b), "");
}

TEST(AgreementTest, ReducescatterComparesOpAndScales) {
  TensorDesc a = Allreduce();
  a.kind = CollectiveKind::kReducescatter;
  TensorDesc b = a;
  b.postscale = 0.25;
  EXPECT_EQ(Diff(a, b), "postscale: 1 / 0.25");
}

TEST(AgreementTest, AllgatherAndAlltoallMayDifferInTheFirstDimensionOnly) {
  for (CollectiveKind kind : {CollectiveKind::kAllgather, CollectiveKind::kAlltoall}) {
    TensorDesc a = Allreduce();
    a.kind = kind;
    a.shape = {2, 3};
    TensorDesc b = a;
    b.shape = {7, 3};
    EXPECT_EQ(Diff(a, b), "") << CollectiveKindName(kind);
    b.shape = {2, 4};
    EXPECT_EQ(Diff(a, b), "shape: [2,3] / [2,4]");
    b.shape = {};
    EXPECT_EQ(Diff(a, b), "shape: [2,3] / []");
    a.shape = {};
    EXPECT_EQ(Diff(a, b), "");
  }
}

TEST(AgreementTest, ProcessSetChangesCompareOnlyTheirRanksOrId) {
  TensorDesc a;
  a.kind = CollectiveKind::kAddProcessSet;
  a.aux = {0, 2};
  TensorDesc b = a;
  b.dtype = DType::kInt8;  // carries no meaning for a set change
  b.shape = {9};
  EXPECT_EQ(Diff(a, b), "");
  b.aux = {0, 3};
  EXPECT_EQ(Diff(a, b), "ranks: [0,2] / [0,3]");
  a.kind = b.kind = CollectiveKind::kRemoveProcessSet;
  a.aux = {1};
  b.aux = {2};
  EXPECT_EQ(Diff(a, b), "process set: 1 / 2");
}

TEST(AgreementTest, OtherKindsAuxIsNotCompared) {
  TensorDesc a = Allreduce();
  a.kind = CollectiveKind::kAlltoall;
  TensorDesc b = a;
  a.aux = {1, 3};  // splits differ per rank
  b.aux = {2, 2};
  EXPECT_EQ(Diff(a, b), "");
}

TEST(AgreementTest, MessageNamesRanks) {
  TensorDesc a = Allreduce();
  TensorDesc b = a;
  b.shape = {4, 5};
  absl::Status s = Disagreement(a.kind, "x", "rank 0", "rank 3", *Difference(a, b));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "allreduce \"x\": rank 3 sent shape [4,5], rank 0 sent [4,4]");
}

TEST(AgreementTest, MessageNamesNodes) {
  TensorDesc a = Allreduce();
  TensorDesc b = a;
  b.on_device = true;
  absl::Status s =
      Disagreement(a.kind, "w", "ranks 0-1 (node A)", "ranks 2-3 (node B)", *Difference(a, b));
  EXPECT_EQ(s.message(),
            "allreduce \"w\": ranks 2-3 (node B) sent a tensor in device memory, ranks 0-1 "
            "(node A) sent a tensor in host memory");
}

TEST(AgreementTest, DescriptionsFromARequestAndFromMetadataAgree) {
  Request r;
  r.kind = CollectiveKind::kBroadcast;
  r.dtype = DType::kInt64;
  r.root_rank = 2;
  r.shape = {3, 5};
  r.bytes = 120;
  r.process_set = 4;
  r.group_size = 2;
  r.device = cuda::DeviceIo{};
  r.device->input.device = 1;
  kolo::v1::TensorMeta m;
  m.set_kind(static_cast<uint32_t>(r.kind));
  m.set_dtype(static_cast<uint32_t>(r.dtype));
  m.set_root_rank(2);
  m.add_shape(3);
  m.add_shape(5);
  m.set_prescale(1);
  m.set_postscale(1);
  m.set_bytes(120);
  m.set_process_set(4);
  m.set_group_size(2);
  m.set_device(true);
  const TensorDesc from_request = DescOf(r);
  const TensorDesc from_meta = DescOf(m);
  EXPECT_EQ(Diff(from_request, from_meta), "");
  EXPECT_EQ(from_request.device, 1);
  EXPECT_EQ(from_meta.device, -1);
  EXPECT_EQ(from_meta.process_set, 4);
  EXPECT_EQ(from_meta.bytes, 120u);
}

}  // namespace
}  // namespace kolo::daemon::plan
