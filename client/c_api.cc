// libkolo's C ABI over the C++ API.
#include "kolo/c_api.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "kolo/kolo.h"

struct kolo_client {
  std::unique_ptr<kolo::Client> client;
  absl::Mutex mu;
  // Buffers handed out by kolo_alloc, by address.
  absl::flat_hash_map<void*, kolo::HostBuffer> buffers ABSL_GUARDED_BY(mu);
};

namespace {

thread_local std::string last_error;

kolo_status Report(const absl::Status& s) {
  if (s.ok()) return 0;
  last_error = std::string(s.message());
  return static_cast<kolo_status>(s.code());
}

std::vector<int64_t> Shape(const int64_t* shape, int ndim) {
  if (shape == nullptr || ndim <= 0) return {};
  return std::vector<int64_t>(shape, shape + ndim);
}

absl::Status CheckArgs(kolo_client* c, int dtype, int ndim, const char* name) {
  if (c == nullptr) return absl::InvalidArgumentError("null kolo_client");
  if (dtype < 0 || dtype >= static_cast<int>(kolo::kNumDTypes)) {
    return absl::InvalidArgumentError("unknown dtype");
  }
  if (ndim < 0) return absl::InvalidArgumentError("negative ndim");
  if (name == nullptr) return absl::InvalidArgumentError("null name");
  return absl::OkStatus();
}

}  // namespace

extern "C" {

kolo_status kolo_init(kolo_client** out) {
  if (out == nullptr) return Report(absl::InvalidArgumentError("null out"));
  auto options = kolo::ClientOptions::FromEnv();
  if (!options.ok()) return Report(options.status());
  auto client = kolo::Client::Connect(*options);
  if (!client.ok()) return Report(client.status());
  auto* c = new kolo_client();
  c->client = std::move(*client);
  *out = c;
  return 0;
}

void kolo_shutdown(kolo_client* client) { delete client; }

int kolo_rank(const kolo_client* c) { return c->client->rank(); }
int kolo_size(const kolo_client* c) { return c->client->size(); }
int kolo_local_rank(const kolo_client* c) { return c->client->local_rank(); }
int kolo_local_size(const kolo_client* c) { return c->client->local_size(); }

kolo_status kolo_alloc(kolo_client* c, size_t bytes, void** out) {
  if (c == nullptr || out == nullptr) {
    return Report(absl::InvalidArgumentError("null argument"));
  }
  auto buf = c->client->Allocate(kolo::DType::kUint8,
                                 {static_cast<int64_t>(bytes)});
  if (!buf.ok()) return Report(buf.status());
  void* p = buf->data();
  absl::MutexLock l(&c->mu);
  c->buffers.emplace(p, *std::move(buf));
  *out = p;
  return 0;
}

void kolo_free(kolo_client* c, void* ptr) {
  if (c == nullptr || ptr == nullptr) return;
  absl::MutexLock l(&c->mu);
  c->buffers.erase(ptr);
}

kolo_status kolo_allreduce_async(kolo_client* c, const void* input,
                                 void* output, int dtype, const int64_t* shape,
                                 int ndim, const char* name, int op,
                                 double prescale, double postscale,
                                 kolo_handle* out) {
  if (absl::Status s = CheckArgs(c, dtype, ndim, name); !s.ok()) return Report(s);
  if (op < 0 || op >= static_cast<int>(kolo::kNumReduceOps)) {
    return Report(absl::InvalidArgumentError("unknown reduce op"));
  }
  auto t = static_cast<kolo::DType>(dtype);
  kolo::AllreduceOptions options{static_cast<kolo::ReduceOp>(op), prescale,
                                 postscale};
  auto h = c->client->AllreduceAsync(
      kolo::ConstTensorView(input, t, Shape(shape, ndim)),
      kolo::TensorView{output, t, Shape(shape, ndim)}, name, options);
  if (!h.ok()) return Report(h.status());
  if (out != nullptr) *out = h->id;
  return 0;
}

kolo_status kolo_allreduce(kolo_client* c, const void* input, void* output,
                           int dtype, const int64_t* shape, int ndim,
                           const char* name, int op) {
  kolo_handle h = 0;
  kolo_status s = kolo_allreduce_async(c, input, output, dtype, shape, ndim,
                                       name, op, 1.0, 1.0, &h);
  if (s != 0) return s;
  return kolo_wait(c, h);
}

kolo_status kolo_broadcast_async(kolo_client* c, void* tensor, int dtype,
                                 const int64_t* shape, int ndim,
                                 const char* name, int root_rank,
                                 kolo_handle* out) {
  if (absl::Status s = CheckArgs(c, dtype, ndim, name); !s.ok()) return Report(s);
  auto h = c->client->BroadcastAsync(
      kolo::TensorView{tensor, static_cast<kolo::DType>(dtype), Shape(shape, ndim)},
      name, root_rank);
  if (!h.ok()) return Report(h.status());
  if (out != nullptr) *out = h->id;
  return 0;
}

kolo_status kolo_broadcast(kolo_client* c, void* tensor, int dtype,
                           const int64_t* shape, int ndim, const char* name,
                           int root_rank) {
  kolo_handle h = 0;
  kolo_status s =
      kolo_broadcast_async(c, tensor, dtype, shape, ndim, name, root_rank, &h);
  if (s != 0) return s;
  return kolo_wait(c, h);
}

kolo_status kolo_wait(kolo_client* c, kolo_handle handle) {
  if (c == nullptr) return Report(absl::InvalidArgumentError("null kolo_client"));
  return Report(c->client->Wait(kolo::Handle{handle}));
}

kolo_status kolo_test(kolo_client* c, kolo_handle handle, int* done) {
  if (c == nullptr || done == nullptr) {
    return Report(absl::InvalidArgumentError("null argument"));
  }
  auto r = c->client->Test(kolo::Handle{handle});
  if (!r.ok()) return Report(r.status());
  *done = *r ? 1 : 0;
  return 0;
}

const char* kolo_last_error(void) { return last_error.c_str(); }

}  // extern "C"
