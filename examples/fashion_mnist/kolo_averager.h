// GradientAverager over Kolo's client SDK. Gradients live in HostBuffers from
// the session's shared-memory arena, so the per-step allreduce moves no bytes
// between this process and kolod; each of the four gradient tensors is its own
// request ("grad/<tensor name>"), all submitted before any is waited on so the
// daemon can fuse them.
//
// Thread-safety: used by one thread at a time (the Client itself is
// thread-safe; the buffers held here are not).
#pragma once

#include <deque>
#include <memory>

#include "examples/fashion_mnist/gradient_averager.h"
#include "kolo/kolo.h"

namespace kolo::fashion_mnist {

class KoloAverager final : public GradientAverager {
 public:
  // `client` must outlive the averager.
  explicit KoloAverager(Client* client) : client_(client) {}
  ~KoloAverager() override = default;

  int rank() const override { return client_->rank(); }
  int size() const override { return client_->size(); }
  absl::StatusOr<std::span<float>> AllocateGradient(const std::string& name,
                                                    const std::vector<int64_t>& shape) override;
  absl::Status BroadcastParameters(std::span<const NamedTensor> params) override;
  absl::Status AverageGradients(std::span<const NamedTensor> grads) override;
  absl::StatusOr<double> AverageScalar(const std::string& name, double value) override;
  absl::StatusOr<double> SumScalar(const std::string& name, double value) override;

 private:
  absl::StatusOr<double> ReduceScalar(const std::string& name, double value, ReduceOp op);

  Client* const client_;
  // Declared after client_ so they are freed before it could be.
  std::deque<HostBuffer> buffers_;
};

}  // namespace kolo::fashion_mnist
