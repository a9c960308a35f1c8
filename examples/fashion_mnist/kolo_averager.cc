#include "examples/fashion_mnist/kolo_averager.h"

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kolo::fashion_mnist {
namespace {

TensorView ViewOf(const NamedTensor& t) {
  return TensorView{t.values.data(), DType::kFloat32, t.shape};
}

}  // namespace

absl::StatusOr<std::span<float>> KoloAverager::AllocateGradient(const std::string& name,
                                                                const std::vector<int64_t>& shape) {
  absl::StatusOr<HostBuffer> buffer = client_->Allocate(DType::kFloat32, shape);
  if (!buffer.ok()) {
    return absl::Status(buffer.status().code(), absl::StrCat("allocating gradient \"", name,
                                                             "\": ", buffer.status().message()));
  }
  HostBuffer& held = buffers_.emplace_back(*std::move(buffer));
  const size_t n = held.byte_size() / sizeof(float);
  std::memset(held.data(), 0, held.byte_size());
  return std::span<float>(held.data_as<float>(), n);
}

absl::Status KoloAverager::BroadcastParameters(std::span<const NamedTensor> params) {
  for (const NamedTensor& p : params) {
    absl::Status s = client_->Broadcast(ViewOf(p), absl::StrCat("param/", p.name), 0);
    if (!s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("broadcast \"param/", p.name, "\": ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status KoloAverager::AverageGradients(std::span<const NamedTensor> grads) {
  std::vector<std::pair<std::string, Handle>> pending;
  absl::Status first_error;
  for (const NamedTensor& g : grads) {
    std::string name = absl::StrCat("grad/", g.name);
    const TensorView view = ViewOf(g);
    absl::StatusOr<Handle> handle =
        client_->AllreduceAsync(view, view, name, AllreduceOptions{.op = ReduceOp::kAverage});
    if (!handle.ok()) {
      first_error =
          absl::Status(handle.status().code(),
                       absl::StrCat("allreduce \"", name, "\": ", handle.status().message()));
      break;  // Submit no more; still wait for what was submitted.
    }
    pending.emplace_back(std::move(name), *handle);
  }
  // Every handle is consumed, even after a failure, so none is left pending.
  for (auto& [name, handle] : pending) {
    absl::Status s = client_->Wait(handle);
    if (!s.ok() && first_error.ok()) {
      first_error = absl::Status(s.code(), absl::StrCat("allreduce \"", name, "\": ", s.message()));
    }
  }
  return first_error;
}

absl::StatusOr<double> KoloAverager::ReduceScalar(const std::string& name, double value,
                                                  ReduceOp op) {
  double result = value;
  const TensorView view{&result, DType::kFloat64, {1}};
  absl::Status s = client_->Allreduce(view, view, name, op);
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("allreduce \"", name, "\": ", s.message()));
  }
  return result;
}

absl::StatusOr<double> KoloAverager::AverageScalar(const std::string& name, double value) {
  return ReduceScalar(name, value, ReduceOp::kAverage);
}

absl::StatusOr<double> KoloAverager::SumScalar(const std::string& name, double value) {
  return ReduceScalar(name, value, ReduceOp::kSum);
}

}  // namespace kolo::fashion_mnist
