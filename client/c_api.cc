// libkolo's C ABI over the C++ API.
#include "kolo/c_api.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "kolo/kolo.h"

struct kolo_client {
  std::unique_ptr<kolo::Client> client;
  absl::Mutex mu;
  // Buffers handed out by kolo_alloc, by address.
  absl::flat_hash_map<void*, kolo::HostBuffer> buffers ABSL_GUARDED_BY(mu);
};

struct kolo_tensor {
  kolo::HostBuffer buffer;
  std::vector<int64_t> shape;
  std::vector<int64_t> received_splits;
};

namespace {

// The C enum is the ABI's DType, value for value.
static_assert(KOLO_UINT8 == static_cast<int>(kolo::DType::kUint8));
static_assert(KOLO_INT8 == static_cast<int>(kolo::DType::kInt8));
static_assert(KOLO_INT16 == static_cast<int>(kolo::DType::kInt16));
static_assert(KOLO_INT32 == static_cast<int>(kolo::DType::kInt32));
static_assert(KOLO_INT64 == static_cast<int>(kolo::DType::kInt64));
static_assert(KOLO_FLOAT16 == static_cast<int>(kolo::DType::kFloat16));
static_assert(KOLO_BFLOAT16 == static_cast<int>(kolo::DType::kBFloat16));
static_assert(KOLO_FLOAT32 == static_cast<int>(kolo::DType::kFloat32));
static_assert(KOLO_FLOAT64 == static_cast<int>(kolo::DType::kFloat64));
static_assert(KOLO_BOOL == static_cast<int>(kolo::DType::kBool));
static_assert(KOLO_UINT16 == static_cast<int>(kolo::DType::kUint16));
static_assert(KOLO_UINT16 + 1 == static_cast<int>(kolo::kNumDTypes));

thread_local std::string last_error;

kolo::AllreduceOptions ToOptions(const kolo_allreduce_options* o) {
  kolo::AllreduceOptions out;
  if (o == nullptr) return out;
  out.op = static_cast<kolo::ReduceOp>(o->op);
  out.prescale = o->prescale;
  out.postscale = o->postscale;
  out.compression = static_cast<kolo::Compression>(o->compression);
  out.process_set = o->process_set;
  return out;
}

absl::Status CheckOptions(const kolo_allreduce_options* o) {
  if (o == nullptr) return absl::OkStatus();
  if (o->op < 0 || o->op >= static_cast<int>(kolo::kNumReduceOps)) {
    return absl::InvalidArgumentError("unknown reduce op");
  }
  if (o->compression < 0 || o->compression >= static_cast<int>(kolo::kNumCompressions)) {
    return absl::InvalidArgumentError("unknown compression");
  }
  return absl::OkStatus();
}

kolo_tensor* NewTensor(kolo::HostBuffer buffer, std::vector<int64_t> splits = {}) {
  auto* t = new kolo_tensor();
  t->shape = buffer.shape();
  t->buffer = std::move(buffer);
  t->received_splits = std::move(splits);
  return t;
}

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
  auto buf = c->client->Allocate(kolo::DType::kUint8, {static_cast<int64_t>(bytes)});
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

kolo_status kolo_allreduce_async(kolo_client* c, const void* input, void* output, int dtype,
                                 const int64_t* shape, int ndim, const char* name, int op,
                                 double prescale, double postscale, kolo_handle* out) {
  if (absl::Status s = CheckArgs(c, dtype, ndim, name); !s.ok()) return Report(s);
  if (op < 0 || op >= static_cast<int>(kolo::kNumReduceOps)) {
    return Report(absl::InvalidArgumentError("unknown reduce op"));
  }
  auto t = static_cast<kolo::DType>(dtype);
  kolo::AllreduceOptions options{static_cast<kolo::ReduceOp>(op), prescale, postscale};
  auto h =
      c->client->AllreduceAsync(kolo::ConstTensorView(input, t, Shape(shape, ndim)),
                                kolo::TensorView{output, t, Shape(shape, ndim)}, name, options);
  if (!h.ok()) return Report(h.status());
  if (out != nullptr) *out = h->id;
  return 0;
}

kolo_status kolo_allreduce(kolo_client* c, const void* input, void* output, int dtype,
                           const int64_t* shape, int ndim, const char* name, int op) {
  kolo_handle h = 0;
  kolo_status s =
      kolo_allreduce_async(c, input, output, dtype, shape, ndim, name, op, 1.0, 1.0, &h);
  if (s != 0) return s;
  return kolo_wait(c, h);
}

kolo_status kolo_broadcast_async(kolo_client* c, void* tensor, int dtype, const int64_t* shape,
                                 int ndim, const char* name, int root_rank, kolo_handle* out) {
  if (absl::Status s = CheckArgs(c, dtype, ndim, name); !s.ok()) return Report(s);
  auto h = c->client->BroadcastAsync(
      kolo::TensorView{tensor, static_cast<kolo::DType>(dtype), Shape(shape, ndim)}, name,
      root_rank);
  if (!h.ok()) return Report(h.status());
  if (out != nullptr) *out = h->id;
  return 0;
}

kolo_status kolo_broadcast(kolo_client* c, void* tensor, int dtype, const int64_t* shape, int ndim,
                           const char* name, int root_rank) {
  kolo_handle h = 0;
  kolo_status s = kolo_broadcast_async(c, tensor, dtype, shape, ndim, name, root_rank, &h);
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

void kolo_allreduce_options_init(kolo_allreduce_options* o) {
  if (o == nullptr) return;
  o->op = KOLO_SUM;
  o->prescale = 1.0;
  o->postscale = 1.0;
  o->compression = KOLO_COMPRESSION_NONE;
  o->process_set = 0;
}

const void* kolo_tensor_data(const kolo_tensor* t) { return t ? t->buffer.data() : nullptr; }
size_t kolo_tensor_bytes(const kolo_tensor* t) { return t ? t->buffer.byte_size() : 0; }
int kolo_tensor_ndim(const kolo_tensor* t) { return t ? static_cast<int>(t->shape.size()) : 0; }
const int64_t* kolo_tensor_shape(const kolo_tensor* t) { return t ? t->shape.data() : nullptr; }
int kolo_tensor_num_splits(const kolo_tensor* t) {
  return t ? static_cast<int>(t->received_splits.size()) : 0;
}
const int64_t* kolo_tensor_received_splits(const kolo_tensor* t) {
  return t ? t->received_splits.data() : nullptr;
}
void kolo_tensor_free(kolo_tensor* t) { delete t; }

kolo_status kolo_allreduce_ex(kolo_client* c, const void* input, void* output, int dtype,
                              const int64_t* shape, int ndim, const char* name,
                              const kolo_allreduce_options* options, kolo_handle* out) {
  if (absl::Status s = CheckArgs(c, dtype, ndim, name); !s.ok()) return Report(s);
  if (absl::Status s = CheckOptions(options); !s.ok()) return Report(s);
  auto t = static_cast<kolo::DType>(dtype);
  auto h = c->client->AllreduceAsync(kolo::ConstTensorView(input, t, Shape(shape, ndim)),
                                     kolo::TensorView{output, t, Shape(shape, ndim)}, name,
                                     ToOptions(options));
  if (!h.ok()) return Report(h.status());
  if (out != nullptr) *out = h->id;
  return 0;
}

kolo_status kolo_broadcast_ex(kolo_client* c, void* tensor, int dtype, const int64_t* shape,
                              int ndim, const char* name, int root_rank, int process_set,
                              kolo_handle* out) {
  if (absl::Status s = CheckArgs(c, dtype, ndim, name); !s.ok()) return Report(s);
  auto h = c->client->BroadcastAsync(
      kolo::TensorView{tensor, static_cast<kolo::DType>(dtype), Shape(shape, ndim)}, name,
      root_rank, {.process_set = process_set});
  if (!h.ok()) return Report(h.status());
  if (out != nullptr) *out = h->id;
  return 0;
}

kolo_status kolo_allreduce_device(kolo_client* c, const void* input, void* output, int dtype,
                                  const int64_t* shape, int ndim, const char* name, int device,
                                  void* cuda_stream, const kolo_allreduce_options* options,
                                  kolo_handle* out) {
  if (absl::Status s = CheckArgs(c, dtype, ndim, name); !s.ok()) return Report(s);
  if (absl::Status s = CheckOptions(options); !s.ok()) return Report(s);
  if (device < 0) {
    return Report(absl::InvalidArgumentError(
        absl::StrCat("\"", name, "\": device ", device, " is not a CUDA ordinal")));
  }
  auto t = static_cast<kolo::DType>(dtype);
  kolo::AllreduceOptions o = ToOptions(options);
  o.cuda_stream = cuda_stream;
  auto h =
      c->client->AllreduceAsync(kolo::ConstTensorView(input, t, Shape(shape, ndim), device),
                                kolo::TensorView{output, t, Shape(shape, ndim), device}, name, o);
  if (!h.ok()) return Report(h.status());
  if (out != nullptr) *out = h->id;
  return 0;
}

kolo_status kolo_broadcast_device(kolo_client* c, void* tensor, int dtype, const int64_t* shape,
                                  int ndim, const char* name, int root_rank, int device,
                                  void* cuda_stream, kolo_handle* out) {
  if (absl::Status s = CheckArgs(c, dtype, ndim, name); !s.ok()) return Report(s);
  if (device < 0) {
    return Report(absl::InvalidArgumentError(
        absl::StrCat("\"", name, "\": device ", device, " is not a CUDA ordinal")));
  }
  auto h = c->client->BroadcastAsync(
      kolo::TensorView{tensor, static_cast<kolo::DType>(dtype), Shape(shape, ndim), device}, name,
      root_rank, {.process_set = 0, .cuda_stream = cuda_stream});
  if (!h.ok()) return Report(h.status());
  if (out != nullptr) *out = h->id;
  return 0;
}

kolo_status kolo_allgather_async(kolo_client* c, const void* input, int dtype, const int64_t* shape,
                                 int ndim, const char* name, int process_set, kolo_handle* out) {
  if (absl::Status s = CheckArgs(c, dtype, ndim, name); !s.ok()) return Report(s);
  auto h = c->client->AllgatherAsync(
      kolo::ConstTensorView(input, static_cast<kolo::DType>(dtype), Shape(shape, ndim)), name,
      {.process_set = process_set});
  if (!h.ok()) return Report(h.status());
  if (out != nullptr) *out = h->id;
  return 0;
}

kolo_status kolo_allgather(kolo_client* c, const void* input, int dtype, const int64_t* shape,
                           int ndim, const char* name, int process_set, kolo_tensor** out) {
  kolo_handle h = 0;
  if (kolo_status s = kolo_allgather_async(c, input, dtype, shape, ndim, name, process_set, &h);
      s != 0) {
    return s;
  }
  return kolo_wait_tensor(c, h, out);
}

kolo_status kolo_reducescatter(kolo_client* c, const void* input, int dtype, const int64_t* shape,
                               int ndim, const char* name, const kolo_allreduce_options* options,
                               kolo_tensor** out) {
  if (absl::Status s = CheckArgs(c, dtype, ndim, name); !s.ok()) return Report(s);
  if (absl::Status s = CheckOptions(options); !s.ok()) return Report(s);
  if (out == nullptr) return Report(absl::InvalidArgumentError("null out"));
  auto r = c->client->Reducescatter(
      kolo::ConstTensorView(input, static_cast<kolo::DType>(dtype), Shape(shape, ndim)), name,
      ToOptions(options));
  if (!r.ok()) return Report(r.status());
  *out = NewTensor(*std::move(r));
  return 0;
}

kolo_status kolo_alltoall(kolo_client* c, const void* input, int dtype, const int64_t* shape,
                          int ndim, const int64_t* splits, int nsplits, const char* name,
                          int process_set, kolo_tensor** out) {
  if (absl::Status s = CheckArgs(c, dtype, ndim, name); !s.ok()) return Report(s);
  if (out == nullptr || nsplits < 0) return Report(absl::InvalidArgumentError("bad argument"));
  std::vector<int64_t> sp;
  if (splits != nullptr) sp.assign(splits, splits + nsplits);
  auto r = c->client->Alltoall(
      kolo::ConstTensorView(input, static_cast<kolo::DType>(dtype), Shape(shape, ndim)),
      std::move(sp), name, {.process_set = process_set});
  if (!r.ok()) return Report(r.status());
  *out = NewTensor(std::move(r->output), std::move(r->received_splits));
  return 0;
}

kolo_status kolo_wait_tensor(kolo_client* c, kolo_handle handle, kolo_tensor** out) {
  if (c == nullptr || out == nullptr) return Report(absl::InvalidArgumentError("null argument"));
  auto r = c->client->WaitForOutput(kolo::Handle{handle});
  if (!r.ok()) return Report(r.status());
  *out = NewTensor(*std::move(r));
  return 0;
}

kolo_status kolo_grouped_allreduce(kolo_client* c, int count, const void* const* inputs,
                                   void* const* outputs, int dtype, const int64_t* const* shapes,
                                   const int* ndims, const char* const* names,
                                   const kolo_allreduce_options* options) {
  if (c == nullptr || count < 0 ||
      (count > 0 && (inputs == nullptr || outputs == nullptr || shapes == nullptr ||
                     ndims == nullptr || names == nullptr))) {
    return Report(absl::InvalidArgumentError("bad argument"));
  }
  if (absl::Status s = CheckOptions(options); !s.ok()) return Report(s);
  std::vector<kolo::ConstTensorView> ins;
  std::vector<kolo::TensorView> outs;
  std::vector<std::string> ns;
  for (int i = 0; i < count; ++i) {
    if (absl::Status s = CheckArgs(c, dtype, ndims[i], names[i]); !s.ok()) return Report(s);
    auto t = static_cast<kolo::DType>(dtype);
    ins.emplace_back(inputs[i], t, Shape(shapes[i], ndims[i]));
    outs.push_back(kolo::TensorView{outputs[i], t, Shape(shapes[i], ndims[i])});
    ns.emplace_back(names[i]);
  }
  auto hs = c->client->GroupedAllreduceAsync(ins, outs, ns, ToOptions(options));
  if (!hs.ok()) return Report(hs.status());
  absl::Status first;
  for (kolo::Handle h : *hs) {
    absl::Status s = c->client->Wait(h);
    if (first.ok()) first = s;
  }
  return Report(first);
}

kolo_status kolo_barrier(kolo_client* c, int process_set) {
  if (c == nullptr) return Report(absl::InvalidArgumentError("null kolo_client"));
  return Report(c->client->Barrier({.process_set = process_set}));
}

kolo_status kolo_join(kolo_client* c, int* last_rank) {
  if (c == nullptr) return Report(absl::InvalidArgumentError("null kolo_client"));
  auto r = c->client->Join();
  if (!r.ok()) return Report(r.status());
  if (last_rank != nullptr) *last_rank = *r;
  return 0;
}

kolo_status kolo_add_process_set(kolo_client* c, const int* ranks, int count, int* id) {
  if (c == nullptr || ranks == nullptr || count <= 0) {
    return Report(absl::InvalidArgumentError("bad argument"));
  }
  auto r = c->client->AddProcessSet(std::vector<int>(ranks, ranks + count));
  if (!r.ok()) return Report(r.status());
  if (id != nullptr) *id = *r;
  return 0;
}

kolo_status kolo_remove_process_set(kolo_client* c, int process_set) {
  if (c == nullptr) return Report(absl::InvalidArgumentError("null kolo_client"));
  return Report(c->client->RemoveProcessSet(process_set));
}

kolo_status kolo_process_set_rank(kolo_client* c, int process_set, int* rank) {
  if (c == nullptr || rank == nullptr) return Report(absl::InvalidArgumentError("null argument"));
  auto r = c->client->ProcessSetRank(process_set);
  if (!r.ok()) return Report(r.status());
  *rank = *r;
  return 0;
}

kolo_status kolo_process_set_size(kolo_client* c, int process_set, int* size) {
  if (c == nullptr || size == nullptr) return Report(absl::InvalidArgumentError("null argument"));
  auto r = c->client->ProcessSetSize(process_set);
  if (!r.ok()) return Report(r.status());
  *size = *r;
  return 0;
}

kolo_status kolo_timeline_start(kolo_client* c, uint64_t max_events) {
  if (c == nullptr) return Report(absl::InvalidArgumentError("null kolo_client"));
  return Report(c->client->StartTimeline(max_events));
}

kolo_status kolo_timeline_stop(kolo_client* c, char** trace, size_t* trace_bytes, uint64_t* events,
                               uint64_t* dropped) {
  if (c == nullptr || trace == nullptr) return Report(absl::InvalidArgumentError("null argument"));
  auto t = c->client->StopTimeline();
  if (!t.ok()) return Report(t.status());
  auto* copy = static_cast<char*>(std::malloc(t->json.size() + 1));
  if (copy == nullptr) {
    return Report(absl::ResourceExhaustedError(
        absl::StrCat("no memory for a timeline trace of ", t->json.size(), " bytes")));
  }
  std::memcpy(copy, t->json.data(), t->json.size());
  copy[t->json.size()] = '\0';
  *trace = copy;
  if (trace_bytes != nullptr) *trace_bytes = t->json.size();
  if (events != nullptr) *events = t->events;
  if (dropped != nullptr) *dropped = t->dropped;
  return 0;
}

void kolo_string_free(char* s) { std::free(s); }

const char* kolo_last_error(void) { return last_error.c_str(); }

}  // extern "C"
