#include "daemon/coordinator/abort_status.h"

#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

TEST(AbortStatusTest, CodeReasonAndPlannedMayFinishTravel) {
  kolo::v1::PeerAbort wire;
  ToPeerAbort(PlannedMayFinish(absl::DeadlineExceededError("rank 3 stalled")), &wire);
  absl::Status back = FromPeerAbort(wire);
  EXPECT_EQ(back.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(back.message(), "rank 3 stalled");
  EXPECT_TRUE(IsPlannedMayFinish(back));

  ToPeerAbort(absl::AbortedError("node B lost"), &wire);
  EXPECT_FALSE(IsPlannedMayFinish(FromPeerAbort(wire)));
}

TEST(AbortStatusTest, AnOkOrUnknownCodeFromAPeerReadsAsAborted) {
  for (uint32_t code : {0u, 17u, 1000u}) {
    kolo::v1::PeerAbort wire;
    wire.set_code(code);
    wire.set_reason("odd");
    absl::Status why = FromPeerAbort(wire);
    EXPECT_EQ(why.code(), absl::StatusCode::kAborted) << code;
    EXPECT_EQ(why.message(), "odd");
  }
}

}  // namespace
}  // namespace kolo::daemon
