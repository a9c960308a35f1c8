#include "absl/strings/match.h"
#include "client/device_tensor_io.h"
#include "gtest/gtest.h"

namespace kolo::client {
namespace {

// The implementation a libkolo without CUDA links: device tensors are
// refused before anything reaches kolod, and the slot is left alone.
TEST(NoDeviceTensorIoTest, RefusesDeviceTensorsWithUnimplemented) {
  std::unique_ptr<DeviceTensorIo> io = MakeDeviceTensorIo();
  abi::v1::SubmitSlot slot{};
  int buffer = 0;
  auto pending = io->Prepare(&buffer, sizeof(buffer), &buffer, sizeof(buffer), 0, nullptr, &slot);
  ASSERT_FALSE(pending.ok());
  EXPECT_EQ(pending.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(absl::StrContains(pending.status().message(), "libkolo was built without CUDA"))
      << pending.status();
  EXPECT_EQ(slot.flags, 0u);
}

}  // namespace
}  // namespace kolo::client
