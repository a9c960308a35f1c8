#include "examples/bench/resnet50_shapes.h"

#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kolo::bench {
namespace {

using ::testing::StartsWith;

const GradientTensor* Find(const std::vector<GradientTensor>& params, const std::string& name) {
  for (const GradientTensor& t : params) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

TEST(ResNet50ShapesTest, CountsMatchTheModel) {
  const std::vector<GradientTensor> params = ResNet50Parameters();
  EXPECT_EQ(params.size(), 161u);
  EXPECT_EQ(TotalElements(params), 25'557'032);
  EXPECT_EQ(static_cast<int>(params.size()), kResNet50Tensors);
  EXPECT_EQ(TotalElements(params), kResNet50Parameters);
}

TEST(ResNet50ShapesTest, NamesAreUnique) {
  const std::vector<GradientTensor> params = ResNet50Parameters();
  std::set<std::string> names;
  for (const GradientTensor& t : params) names.insert(t.name);
  EXPECT_EQ(names.size(), params.size());
}

TEST(ResNet50ShapesTest, LayerShapes) {
  const std::vector<GradientTensor> params = ResNet50Parameters();
  struct Want {
    std::string name;
    std::vector<int64_t> shape;
  };
  const std::vector<Want> wants = {
      {"conv1.weight", {64, 3, 7, 7}},
      {"bn1.bias", {64}},
      {"layer1.0.conv1.weight", {64, 64, 1, 1}},
      {"layer1.0.downsample.0.weight", {256, 64, 1, 1}},
      {"layer1.1.conv1.weight", {64, 256, 1, 1}},
      {"layer2.0.conv2.weight", {128, 128, 3, 3}},
      {"layer2.0.downsample.0.weight", {512, 256, 1, 1}},
      {"layer3.5.conv3.weight", {1024, 256, 1, 1}},
      {"layer4.0.downsample.1.weight", {2048}},
      {"layer4.2.conv3.weight", {2048, 512, 1, 1}},
      {"layer4.2.bn3.bias", {2048}},
      {"fc.weight", {1000, 2048}},
      {"fc.bias", {1000}},
  };
  for (const Want& w : wants) {
    const GradientTensor* t = Find(params, w.name);
    ASSERT_NE(t, nullptr) << w.name;
    EXPECT_EQ(t->shape, w.shape) << w.name;
  }
  EXPECT_EQ(Find(params, "layer1.1.downsample.0.weight"), nullptr);
  EXPECT_EQ(Find(params, "layer3.6.conv1.weight"), nullptr);
}

TEST(ResNet50ShapesTest, BackwardOrderStartsAtTheClassifier) {
  const std::vector<GradientTensor> grads = BackwardOrder(ResNet50Parameters());
  ASSERT_EQ(grads.size(), 161u);
  EXPECT_EQ(grads[0].name, "fc.bias");
  EXPECT_EQ(grads[1].name, "fc.weight");
  EXPECT_EQ(grads[2].name, "layer4.2.bn3.bias");
  EXPECT_EQ(grads.back().name, "conv1.weight");
}

TEST(ResNet50ShapesTest, ShapeTableText) {
  const std::string text = ShapeTableText({{"fc.weight", {1000, 2048}}, {"fc.bias", {1000}}});
  EXPECT_EQ(text, "# name dims...\nfc.weight 1000 2048\nfc.bias 1000\n");
  EXPECT_THAT(ShapeTableText(ResNet50Parameters()),
              StartsWith("# name dims...\nconv1.weight 64 3 7 7\n"));
}

}  // namespace
}  // namespace kolo::bench
