#include "examples/bench/resnet50_shapes.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kolo::bench {
namespace {

// One stage of bottleneck blocks.
struct Stage {
  int blocks;
  int64_t width;
};

constexpr Stage kStages[] = {{3, 64}, {4, 128}, {6, 256}, {3, 512}};
constexpr int64_t kExpansion = 4;
constexpr int64_t kStemChannels = 64;
constexpr int64_t kInputChannels = 3;
constexpr int64_t kClasses = 1000;

// Appends a bias-free convolution's weight and its batch norm's gamma and
// beta.
void AddConvBn(const std::string& conv, const std::string& bn, int64_t out, int64_t in,
               int64_t kernel, std::vector<GradientTensor>* params) {
  params->push_back({conv + ".weight", {out, in, kernel, kernel}});
  params->push_back({bn + ".weight", {out}});
  params->push_back({bn + ".bias", {out}});
}

}  // namespace

int64_t GradientTensor::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<GradientTensor> ResNet50Parameters() {
  std::vector<GradientTensor> params;
  AddConvBn("conv1", "bn1", kStemChannels, kInputChannels, 7, &params);
  int64_t in = kStemChannels;
  for (size_t s = 0; s < std::size(kStages); ++s) {
    const Stage& stage = kStages[s];
    const int64_t out = stage.width * kExpansion;
    for (int b = 0; b < stage.blocks; ++b) {
      const std::string block = absl::StrCat("layer", s + 1, ".", b, ".");
      AddConvBn(block + "conv1", block + "bn1", stage.width, in, 1, &params);
      AddConvBn(block + "conv2", block + "bn2", stage.width, stage.width, 3, &params);
      AddConvBn(block + "conv3", block + "bn3", out, stage.width, 1, &params);
      // The first block changes the channel count (and, past stage 1, the
      // stride), so its shortcut needs a projection.
      if (b == 0) {
        AddConvBn(block + "downsample.0", block + "downsample.1", out, in, 1, &params);
      }
      in = out;
    }
  }
  params.push_back({"fc.weight", {kClasses, in}});
  params.push_back({"fc.bias", {kClasses}});
  return params;
}

std::vector<GradientTensor> BackwardOrder(std::vector<GradientTensor> params) {
  std::reverse(params.begin(), params.end());
  return params;
}

int64_t TotalElements(const std::vector<GradientTensor>& tensors) {
  int64_t total = 0;
  for (const GradientTensor& t : tensors) total += t.num_elements();
  return total;
}

std::string ShapeTableText(const std::vector<GradientTensor>& tensors) {
  std::string text = "# name dims...\n";
  for (const GradientTensor& t : tensors) {
    absl::StrAppend(&text, t.name, " ", absl::StrJoin(t.shape, " "), "\n");
  }
  return text;
}

}  // namespace kolo::bench
