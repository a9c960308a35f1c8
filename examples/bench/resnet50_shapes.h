// The gradient list of ResNet-50 (torchvision layout), generated from the
// architecture rather than written out: a 7x7 stem, four stages of bottleneck
// blocks (3, 4, 6, 3 blocks of widths 64, 128, 256, 512, expanded 4x), a
// downsample conv and batch norm in each stage's first block, and a
// 2048 -> 1000 classifier. Convolutions have no bias; every batch norm has a
// gamma ("weight") and a beta ("bias"). 161 tensors, 25,557,032 parameters.
//
// Thread-safety: free functions over values; safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kolo::bench {

inline constexpr int kResNet50Tensors = 161;
inline constexpr int64_t kResNet50Parameters = 25'557'032;

// One trainable parameter, hence one gradient: its name as the model
// declares it ("layer4.2.conv3.weight") and its shape ([out, in, kh, kw] for
// a convolution).
struct GradientTensor {
  std::string name;
  std::vector<int64_t> shape;

  int64_t num_elements() const;
};

// The parameters in declaration (forward) order.
std::vector<GradientTensor> ResNet50Parameters();

// The order in which backward produces the gradients: the last layer first.
std::vector<GradientTensor> BackwardOrder(std::vector<GradientTensor> params);

int64_t TotalElements(const std::vector<GradientTensor>& tensors);

// One line per tensor, in the given order: the name and then the dimensions,
// separated by spaces ("fc.weight 1000 2048"), after one '#' comment line.
// mpi_resnet50_grads reads this, so the table has a single source.
std::string ShapeTableText(const std::vector<GradientTensor>& tensors);

}  // namespace kolo::bench
