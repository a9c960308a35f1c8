#include "client/parts_rule.h"

#include "gtest/gtest.h"
#include "proto/kolo/abi/shm_abi_v1.h"

namespace kolo {
namespace {

PartsQuestion Large() {
  return PartsQuestion{.kind = CollectiveKind::kAllreduce,
                       .bytes = kPartsMinBytes,
                       .name_bytes = 10,
                       .one_node = true,
                       .daemon_takes = true,
                       .has_buffers = true};
}

TEST(PartsRuleTest, LargeHostAllreduceAndBroadcastOfOneNodeJobs) {
  EXPECT_TRUE(GoesInParts(Large()));
  PartsQuestion q = Large();
  q.kind = CollectiveKind::kBroadcast;
  EXPECT_TRUE(GoesInParts(q));
  q.kind = CollectiveKind::kAllgather;
  EXPECT_FALSE(GoesInParts(q));
  q = Large();
  q.bytes = kPartsMinBytes - 1;
  EXPECT_FALSE(GoesInParts(q));
}

TEST(PartsRuleTest, WholeWhereKolodOrTheJobCannotTakeParts) {
  for (bool PartsQuestion::*off :
       {&PartsQuestion::one_node, &PartsQuestion::daemon_takes, &PartsQuestion::has_buffers}) {
    PartsQuestion q = Large();
    q.*off = false;
    EXPECT_FALSE(GoesInParts(q));
  }
  for (bool PartsQuestion::*on : {&PartsQuestion::on_device, &PartsQuestion::grouped}) {
    PartsQuestion q = Large();
    q.*on = true;
    EXPECT_FALSE(GoesInParts(q));
  }
}

// A part's name is the tensor's, the separator and up to 20 digits.
TEST(PartsRuleTest, WholeWhenThePartNamesWouldNotFit) {
  PartsQuestion q = Large();
  q.name_bytes = abi::v1::kMaxNameBytes - kPartSuffixBytes;
  EXPECT_TRUE(GoesInParts(q));
  ++q.name_bytes;
  EXPECT_FALSE(GoesInParts(q));
}

}  // namespace
}  // namespace kolo
