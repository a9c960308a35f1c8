// The seam between training and communication: everything the trainer needs
// from the other ranks of its job. Kolo's implementation is KoloAverager;
// LocalAverager is the one-rank identity used by tests and single-process
// runs.
//
// The tensors are plain float spans rather than Kolo's TensorView so that the
// model, optimizer, trainer and their tests do not depend on the client
// library.
//
// Thread-safety: implementations are called from one training thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kolo::fashion_mnist {

// A float tensor that some other object owns. `name` identifies it across
// ranks (every rank passes the same names in the same order).
struct NamedTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::span<float> values;
};

class GradientAverager {
 public:
  virtual ~GradientAverager() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Storage for a gradient tensor of `shape` that AverageGradients can reduce
  // in place without copying (for Kolo: the session's shared memory). Zeroed;
  // valid as long as the averager.
  virtual absl::StatusOr<std::span<float>> AllocateGradient(const std::string& name,
                                                            const std::vector<int64_t>& shape) = 0;

  // Replaces every tensor with rank 0's values.
  virtual absl::Status BroadcastParameters(std::span<const NamedTensor> params) = 0;

  // Replaces every tensor with its mean over the ranks. All tensors are
  // submitted before any is waited on, so the transport may fuse them.
  // The values should come from AllocateGradient.
  virtual absl::Status AverageGradients(std::span<const NamedTensor> grads) = 0;

  // The mean and the sum of `value` over the ranks; `name` identifies the
  // reduction across ranks.
  virtual absl::StatusOr<double> AverageScalar(const std::string& name, double value) = 0;
  virtual absl::StatusOr<double> SumScalar(const std::string& name, double value) = 0;
};

}  // namespace kolo::fashion_mnist
