#include "python/src/process_client.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace kolo::python {
namespace {

absl::Mutex g_mu;
std::shared_ptr<Client> g_client ABSL_GUARDED_BY(g_mu);

// Writes `s`'s message into the caller's buffer and returns its code.
int Report(const absl::Status& s, char* err, size_t err_len) {
  if (!s.ok() && err != nullptr && err_len > 0) {
    const std::string msg(s.message());
    const size_t n = std::min(msg.size(), err_len - 1);
    std::memcpy(err, msg.data(), n);
    err[n] = '\0';
  }
  return static_cast<int>(s.code());
}

absl::StatusOr<std::vector<int64_t>> ToShape(const int64_t* shape, int ndim) {
  if (ndim < 0 || (ndim > 0 && shape == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat("bad tensor rank ", ndim));
  }
  return std::vector<int64_t>(shape, shape + ndim);
}

// Builds the view pair of one allreduce-like tensor.
absl::Status MakeViews(const void* input, void* output, int dtype, const int64_t* shape, int ndim,
                       ConstTensorView* in, TensorView* out) {
  auto t = ToDType(dtype);
  if (!t.ok()) return t.status();
  auto s = ToShape(shape, ndim);
  if (!s.ok()) return s.status();
  *in = ConstTensorView(input, *t, *s);
  if (out != nullptr) *out = TensorView{output, *t, *std::move(s)};
  return absl::OkStatus();
}

absl::StatusOr<AllreduceOptions> MakeReduceOptions(int op, double prescale, double postscale,
                                                   int compression, int process_set) {
  auto o = ToReduceOp(op);
  if (!o.ok()) return o.status();
  auto c = ToCompression(compression);
  if (!c.ok()) return c.status();
  return AllreduceOptions{.op = *o,
                          .prescale = prescale,
                          .postscale = postscale,
                          .compression = *c,
                          .process_set = process_set};
}

#define KOLO_TABLE_TRY(expr)                         \
  do {                                               \
    absl::Status _st = (expr);                       \
    if (!_st.ok()) return Report(_st, err, err_len); \
  } while (0)

#define KOLO_TABLE_CLIENT(var)                                        \
  auto var##_or = GetProcessClient();                                 \
  if (!var##_or.ok()) return Report(var##_or.status(), err, err_len); \
  std::shared_ptr<Client> var = *std::move(var##_or)

int TInitialized() { return GetProcessClient().ok() ? 1 : 0; }
int TRank() {
  auto c = GetProcessClient();
  return c.ok() ? (*c)->rank() : -1;
}
int TSize() {
  auto c = GetProcessClient();
  return c.ok() ? (*c)->size() : -1;
}

int TAllreduceAsync(const void* input, void* output, int dtype, const int64_t* shape, int ndim,
                    const char* name, int op, double prescale, double postscale, int compression,
                    int process_set, uint64_t* handle, char* err, size_t err_len) {
  KOLO_TABLE_CLIENT(client);
  ConstTensorView in;
  TensorView out;
  KOLO_TABLE_TRY(MakeViews(input, output, dtype, shape, ndim, &in, &out));
  auto opts = MakeReduceOptions(op, prescale, postscale, compression, process_set);
  KOLO_TABLE_TRY(opts.status());
  auto h = client->AllreduceAsync(in, out, name, *opts);
  KOLO_TABLE_TRY(h.status());
  *handle = h->id;
  return 0;
}

int TGroupedAllreduceAsync(int n, const void* const* inputs, void* const* outputs,
                           const int* dtypes, const int64_t* const* shapes, const int* ndims,
                           const char* const* names, int op, double prescale, double postscale,
                           int compression, int process_set, uint64_t* handles, char* err,
                           size_t err_len) {
  KOLO_TABLE_CLIENT(client);
  std::vector<ConstTensorView> ins(n);
  std::vector<TensorView> outs(n);
  std::vector<std::string> ns;
  for (int i = 0; i < n; ++i) {
    KOLO_TABLE_TRY(
        MakeViews(inputs[i], outputs[i], dtypes[i], shapes[i], ndims[i], &ins[i], &outs[i]));
    ns.emplace_back(names[i]);
  }
  auto opts = MakeReduceOptions(op, prescale, postscale, compression, process_set);
  KOLO_TABLE_TRY(opts.status());
  auto hs = client->GroupedAllreduceAsync(ins, outs, ns, *opts);
  KOLO_TABLE_TRY(hs.status());
  for (int i = 0; i < n; ++i) handles[i] = (*hs)[i].id;
  return 0;
}

int TBroadcastAsync(void* tensor, int dtype, const int64_t* shape, int ndim, const char* name,
                    int root_rank, int process_set, uint64_t* handle, char* err, size_t err_len) {
  KOLO_TABLE_CLIENT(client);
  ConstTensorView in;
  TensorView out;
  KOLO_TABLE_TRY(MakeViews(tensor, tensor, dtype, shape, ndim, &in, &out));
  auto h =
      client->BroadcastAsync(out, name, root_rank, CollectiveOptions{.process_set = process_set});
  KOLO_TABLE_TRY(h.status());
  *handle = h->id;
  return 0;
}

int TAllgatherAsync(const void* input, int dtype, const int64_t* shape, int ndim, const char* name,
                    int process_set, uint64_t* handle, char* err, size_t err_len) {
  KOLO_TABLE_CLIENT(client);
  ConstTensorView in;
  KOLO_TABLE_TRY(MakeViews(input, nullptr, dtype, shape, ndim, &in, nullptr));
  auto h = client->AllgatherAsync(in, name, CollectiveOptions{.process_set = process_set});
  KOLO_TABLE_TRY(h.status());
  *handle = h->id;
  return 0;
}

int TReducescatterAsync(const void* input, int dtype, const int64_t* shape, int ndim,
                        const char* name, int op, double prescale, double postscale,
                        int process_set, uint64_t* handle, char* err, size_t err_len) {
  KOLO_TABLE_CLIENT(client);
  ConstTensorView in;
  KOLO_TABLE_TRY(MakeViews(input, nullptr, dtype, shape, ndim, &in, nullptr));
  auto opts = MakeReduceOptions(op, prescale, postscale, 0, process_set);
  KOLO_TABLE_TRY(opts.status());
  auto h = client->ReducescatterAsync(in, name, *opts);
  KOLO_TABLE_TRY(h.status());
  *handle = h->id;
  return 0;
}

int TAlltoallAsync(const void* input, int dtype, const int64_t* shape, int ndim,
                   const int64_t* splits, int nsplits, const char* name, int process_set,
                   uint64_t* handle, char* err, size_t err_len) {
  KOLO_TABLE_CLIENT(client);
  ConstTensorView in;
  KOLO_TABLE_TRY(MakeViews(input, nullptr, dtype, shape, ndim, &in, nullptr));
  std::vector<int64_t> sp;
  if (nsplits > 0) sp.assign(splits, splits + nsplits);
  auto h =
      client->AlltoallAsync(in, std::move(sp), name, CollectiveOptions{.process_set = process_set});
  KOLO_TABLE_TRY(h.status());
  *handle = h->id;
  return 0;
}

int TWait(uint64_t handle, char* err, size_t err_len) {
  KOLO_TABLE_CLIENT(client);
  return Report(client->Wait(Handle{handle}), err, err_len);
}

int TTestFor(uint64_t handle, int64_t timeout_us, int* ready, char* err, size_t err_len) {
  KOLO_TABLE_CLIENT(client);
  auto r = client->TestFor(Handle{handle}, absl::Microseconds(std::max<int64_t>(timeout_us, 0)));
  KOLO_TABLE_TRY(r.status());
  *ready = *r ? 1 : 0;
  return 0;
}

int TUnderway(uint64_t handle, int* underway, char* err, size_t err_len) {
  KOLO_TABLE_CLIENT(client);
  auto r = client->Underway(Handle{handle});
  KOLO_TABLE_TRY(r.status());
  *underway = *r ? 1 : 0;
  return 0;
}

int TWaitOutput(uint64_t handle, int alltoall, kolo_output_sink sink, void* sink_ctx, char* err,
                size_t err_len) {
  KOLO_TABLE_CLIENT(client);
  HostBuffer out;
  std::vector<int64_t> splits;
  if (alltoall) {
    auto r = client->WaitForAlltoall(Handle{handle});
    KOLO_TABLE_TRY(r.status());
    out = std::move(r->output);
    splits = std::move(r->received_splits);
  } else {
    auto r = client->WaitForOutput(Handle{handle});
    KOLO_TABLE_TRY(r.status());
    out = *std::move(r);
  }
  const std::vector<int64_t>& shape = out.shape();
  void* dest = sink(sink_ctx, shape.data(), static_cast<int>(shape.size()), splits.data(),
                    static_cast<int>(splits.size()));
  if (dest == nullptr && out.byte_size() > 0) {
    return Report(absl::InternalError("could not allocate the collective's output"), err, err_len);
  }
  if (out.byte_size() > 0) std::memcpy(dest, out.data(), out.byte_size());
  return 0;
}

int TBarrier(int process_set, char* err, size_t err_len) {
  KOLO_TABLE_CLIENT(client);
  return Report(client->Barrier(CollectiveOptions{.process_set = process_set}), err, err_len);
}

int TJoin(int* last_rank, char* err, size_t err_len) {
  KOLO_TABLE_CLIENT(client);
  auto r = client->Join();
  KOLO_TABLE_TRY(r.status());
  *last_rank = *r;
  return 0;
}

// The inputs of a grouped call as views (tensors without an output).
absl::Status MakeGroupViews(int n, const void* const* inputs, const int* dtypes,
                            const int64_t* const* shapes, const int* ndims,
                            const char* const* names, std::vector<ConstTensorView>* ins,
                            std::vector<std::string>* ns) {
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat("a group of ", n, " tensors"));
  ins->resize(n);
  for (int i = 0; i < n; ++i) {
    if (absl::Status s =
            MakeViews(inputs[i], nullptr, dtypes[i], shapes[i], ndims[i], &(*ins)[i], nullptr);
        !s.ok()) {
      return s;
    }
    ns->emplace_back(names[i]);
  }
  return absl::OkStatus();
}

int TGroupedAllgatherAsync(int n, const void* const* inputs, const int* dtypes,
                           const int64_t* const* shapes, const int* ndims, const char* const* names,
                           int process_set, uint64_t* handles, char* err, size_t err_len) {
  KOLO_TABLE_CLIENT(client);
  std::vector<ConstTensorView> ins;
  std::vector<std::string> ns;
  KOLO_TABLE_TRY(MakeGroupViews(n, inputs, dtypes, shapes, ndims, names, &ins, &ns));
  auto hs = client->GroupedAllgatherAsync(ins, ns, CollectiveOptions{.process_set = process_set});
  KOLO_TABLE_TRY(hs.status());
  for (int i = 0; i < n; ++i) handles[i] = (*hs)[i].id;
  return 0;
}

int TGroupedReducescatterAsync(int n, const void* const* inputs, const int* dtypes,
                               const int64_t* const* shapes, const int* ndims,
                               const char* const* names, int op, double prescale, double postscale,
                               int process_set, uint64_t* handles, char* err, size_t err_len) {
  KOLO_TABLE_CLIENT(client);
  std::vector<ConstTensorView> ins;
  std::vector<std::string> ns;
  KOLO_TABLE_TRY(MakeGroupViews(n, inputs, dtypes, shapes, ndims, names, &ins, &ns));
  auto opts = MakeReduceOptions(op, prescale, postscale, 0, process_set);
  KOLO_TABLE_TRY(opts.status());
  auto hs = client->GroupedReducescatterAsync(ins, ns, *opts);
  KOLO_TABLE_TRY(hs.status());
  for (int i = 0; i < n; ++i) handles[i] = (*hs)[i].id;
  return 0;
}

int TRefuse(int kind, const char* name, int process_set, const char* message, char* err,
            size_t err_len) {
  KOLO_TABLE_CLIENT(client);
  if (kind < 1 || static_cast<uint32_t>(kind) > kMaxCollectiveKind) {
    return Report(absl::InvalidArgumentError(absl::StrCat("unknown collective kind ", kind)), err,
                  err_len);
  }
  (void)client->Refuse(static_cast<CollectiveKind>(kind), name, process_set,
                       absl::InvalidArgumentError(message));
  return 0;
}

const KoloPyApi kTable = {
    .version = KOLO_PY_API_VERSION,
    .struct_size = sizeof(KoloPyApi),
    .initialized = TInitialized,
    .rank = TRank,
    .size = TSize,
    .allreduce_async = TAllreduceAsync,
    .grouped_allreduce_async = TGroupedAllreduceAsync,
    .broadcast_async = TBroadcastAsync,
    .allgather_async = TAllgatherAsync,
    .reducescatter_async = TReducescatterAsync,
    .alltoall_async = TAlltoallAsync,
    .wait = TWait,
    .wait_output = TWaitOutput,
    .barrier = TBarrier,
    .join = TJoin,
    .grouped_allgather_async = TGroupedAllgatherAsync,
    .grouped_reducescatter_async = TGroupedReducescatterAsync,
    .refuse = TRefuse,
    .test_for = TTestFor,
    .underway = TUnderway,
};

}  // namespace

absl::Status InitProcessClient() {
  absl::MutexLock l(&g_mu);
  if (g_client != nullptr) return absl::OkStatus();
  auto options = ClientOptions::FromEnv();
  if (!options.ok()) return options.status();
  auto client = Client::Connect(*options);
  if (!client.ok()) return client.status();
  g_client = std::shared_ptr<Client>(*std::move(client));
  return absl::OkStatus();
}

void ShutdownProcessClient() {
  std::shared_ptr<Client> last;
  {
    absl::MutexLock l(&g_mu);
    last = std::move(g_client);
    g_client = nullptr;
  }
  // `last` detaches here, outside the lock, once no caller holds it.
}

absl::Status ResetProcessClient() {
  std::shared_ptr<Client> old;
  {
    absl::MutexLock l(&g_mu);
    if (g_client == nullptr) {
      return absl::FailedPreconditionError("kolo is not initialized: call kolo.init() first");
    }
    old = std::move(g_client);
    g_client = nullptr;
  }
  // The next epoch's attach waits for the other ranks: outside the lock.
  auto next = old->Reset();
  if (!next.ok()) return next.status();
  absl::MutexLock l(&g_mu);
  g_client = std::shared_ptr<Client>(*std::move(next));
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Client>> GetProcessClient() {
  absl::MutexLock l(&g_mu);
  if (g_client == nullptr) {
    return absl::FailedPreconditionError("kolo is not initialized: call kolo.init() first");
  }
  return g_client;
}

absl::StatusOr<DType> ToDType(int code) {
  if (code < 0 || static_cast<uint32_t>(code) >= kNumDTypes) {
    return absl::InvalidArgumentError(absl::StrCat("unknown dtype code ", code));
  }
  return static_cast<DType>(code);
}

absl::StatusOr<ReduceOp> ToReduceOp(int code) {
  if (code < 0 || static_cast<uint32_t>(code) >= kNumReduceOps) {
    return absl::InvalidArgumentError(absl::StrCat("unknown reduce op ", code));
  }
  return static_cast<ReduceOp>(code);
}

absl::StatusOr<Compression> ToCompression(int code) {
  if (code < 0 || static_cast<uint32_t>(code) >= kNumCompressions) {
    return absl::InvalidArgumentError(absl::StrCat("unknown compression ", code));
  }
  return static_cast<Compression>(code);
}

const KoloPyApi* PyApiTable() { return &kTable; }

}  // namespace kolo::python
