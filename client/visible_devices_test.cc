#include "client/visible_devices.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kolo::client {
namespace {

using ::testing::HasSubstr;

TEST(VisibleDevicesTest, UnsetMeansTheSameNumbers) {
  VisibleDevices v = VisibleDevices::Parse(std::nullopt);
  EXPECT_EQ(*v.NodeOrdinal(0), 0);
  EXPECT_EQ(*v.NodeOrdinal(5), 5);
  EXPECT_FALSE(v.NodeOrdinal(-1).ok());
}

TEST(VisibleDevicesTest, ANumericListMapsTheClientsOrdinals) {
  VisibleDevices one = VisibleDevices::Parse("3");
  EXPECT_EQ(*one.NodeOrdinal(0), 3);
  EXPECT_THAT(one.NodeOrdinal(1).status().message(), HasSubstr("CUDA_VISIBLE_DEVICES=3"));
  VisibleDevices two = VisibleDevices::Parse(" 6, 2 ");
  EXPECT_EQ(*two.NodeOrdinal(0), 6);
  EXPECT_EQ(*two.NodeOrdinal(1), 2);
}

TEST(VisibleDevicesTest, CudaStopsAtAnInvalidEntry) {
  VisibleDevices v = VisibleDevices::Parse("1,-1,2");
  EXPECT_EQ(*v.NodeOrdinal(0), 1);
  EXPECT_FALSE(v.NodeOrdinal(1).ok());
  VisibleDevices none = VisibleDevices::Parse("");
  EXPECT_FALSE(none.NodeOrdinal(0).ok());  // no GPU visible at all
}

TEST(VisibleDevicesTest, UuidsAreRefusedSayingWhatToDo) {
  VisibleDevices v = VisibleDevices::Parse("GPU-8c3a1f2e-0000-1111-2222-333344445555");
  EXPECT_THAT(v.NodeOrdinal(0).status().message(), HasSubstr("indices"));
}

}  // namespace
}  // namespace kolo::client
