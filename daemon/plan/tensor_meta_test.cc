#include "daemon/plan/tensor_meta.h"

#include <vector>

#include "daemon/plan/tensor_desc.h"
#include "gtest/gtest.h"

namespace kolo::daemon::plan {
namespace {

Request Rank(int rank, CollectiveKind kind, std::vector<int64_t> shape) {
  Request r;
  r.rank = rank;
  r.name = "t";
  r.kind = kind;
  r.shape = std::move(shape);
  r.bytes = 4;
  for (int64_t d : r.shape) r.bytes *= static_cast<uint64_t>(d);
  return r;
}

ReadySet SetOf(std::vector<Request> requests, int process_set = 0) {
  ReadySet set;
  set.name = "t";
  set.process_set = process_set;
  set.requests = std::move(requests);
  return set;
}

TEST(TensorMetaTest, CarriesTheFirstRanksViewAndTheSetsCircumstances) {
  Request r = Rank(0, CollectiveKind::kAllreduce, {4, 2});
  r.op = ReduceOp::kAverage;
  r.prescale = 0.5;
  r.postscale = 2;
  r.compression = Compression::kFloat16;
  r.group_size = 3;
  r.device = cuda::DeviceIo{};
  ReadySet set = SetOf({r}, 2);
  set.joined = 1;
  const kolo::v1::TensorMeta m = MetaOf(set, 4);
  EXPECT_EQ(m.name(), "t");
  EXPECT_EQ(m.kind(), static_cast<uint32_t>(CollectiveKind::kAllreduce));
  EXPECT_EQ(m.op(), static_cast<uint32_t>(ReduceOp::kAverage));
  EXPECT_EQ(m.shape_size(), 2);
  EXPECT_EQ(m.prescale(), 0.5);
  EXPECT_EQ(m.postscale(), 2);
  EXPECT_EQ(m.compression(), static_cast<uint32_t>(Compression::kFloat16));
  EXPECT_EQ(m.bytes(), 32u);
  EXPECT_TRUE(m.device());
  EXPECT_EQ(m.process_set(), 2);
  EXPECT_EQ(m.joined(), 1);
  EXPECT_EQ(m.group_size(), 3u);
  EXPECT_TRUE(m.local_error().empty());
  // Both sides describe it the same way.
  const TensorDesc from_meta = DescOf(m);
  const TensorDesc from_request = DescOf(set.requests.front());
  EXPECT_EQ(from_meta.shape, from_request.shape);
  EXPECT_EQ(from_meta.group_size, from_request.group_size);
  EXPECT_EQ(from_meta.on_device, from_request.on_device);
}

TEST(TensorMetaTest, AllgatherCarriesEveryRanksRowsByRank) {
  ReadySet set = SetOf(
      {Rank(3, CollectiveKind::kAllgather, {5, 2}), Rank(1, CollectiveKind::kAllgather, {7, 2})});
  const kolo::v1::TensorMeta m = MetaOf(set, 4);
  ASSERT_EQ(m.rows_size(), 2);
  EXPECT_EQ(m.rows(0), 7);  // rank 1
  EXPECT_EQ(m.rows(1), 5);  // rank 3
}

TEST(TensorMetaTest, AlltoallCarriesSplitsOrAnEvenSplitOfTheSet) {
  Request uneven = Rank(0, CollectiveKind::kAlltoall, {6, 1});
  uneven.aux = {1, 5};
  ReadySet set = SetOf({uneven, Rank(1, CollectiveKind::kAlltoall, {6, 1})});
  set.set_size = 2;
  const kolo::v1::TensorMeta m = MetaOf(set, 4);
  EXPECT_EQ(std::vector<int64_t>(m.splits().begin(), m.splits().end()),
            (std::vector<int64_t>{1, 5, 3, 3}));
  set.set_size = 0;  // the job's size
  const kolo::v1::TensorMeta j = MetaOf(set, 3);
  EXPECT_EQ(std::vector<int64_t>(j.splits().begin(), j.splits().end()),
            (std::vector<int64_t>{1, 5, 2, 2, 2}));
}

TEST(TensorMetaTest, SetChangesAndJoinsCarryTheirAux) {
  Request add = Rank(0, CollectiveKind::kAddProcessSet, {});
  add.aux = {0, 2, 3};
  kolo::v1::TensorMeta m = MetaOf(SetOf({add}), 4);
  EXPECT_EQ(std::vector<int64_t>(m.aux().begin(), m.aux().end()), (std::vector<int64_t>{0, 2, 3}));
  Request join = Rank(1, CollectiveKind::kJoin, {});
  join.aux = {1, 9};
  m = MetaOf(SetOf({join}), 4);
  EXPECT_EQ(std::vector<int64_t>(m.aux().begin(), m.aux().end()), (std::vector<int64_t>{1}));
  // Allreduce never sends aux.
  Request ar = Rank(0, CollectiveKind::kAllreduce, {2});
  ar.aux = {4};
  EXPECT_EQ(MetaOf(SetOf({ar}), 4).aux_size(), 0);
}

TEST(TensorMetaTest, ALocalDisagreementTravelsAsItsMessage) {
  ReadySet set = SetOf({Rank(0, CollectiveKind::kAllreduce, {2})});
  set.agreement = absl::FailedPreconditionError("allreduce \"t\": rank 1 sent shape [3]");
  EXPECT_EQ(MetaOf(set, 2).local_error(), "allreduce \"t\": rank 1 sent shape [3]");
}

}  // namespace
}  // namespace kolo::daemon::plan
