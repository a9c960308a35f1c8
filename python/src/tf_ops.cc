// Kolo's collectives as TensorFlow ops (CPU tensors), so they run inside
// tf.function graphs with no Python in the path.
//
// Built against the installed TensorFlow's headers (and so its Abseil and
// protobuf), not against libkolo: every call goes through the KoloPyApi
// table that kolo._core hands over with kolo_tf_bind() once loaded, so the
// two never share a C++ type or a library (see kolo/_native.py).
//
// Each op is an AsyncOpKernel: ComputeAsync submits the collective, and a
// closure on a thread of its own waits for it and calls `done`, so no TF
// thread pool thread blocks on other ranks and any number of collectives can
// be in flight at once, whatever order the graph runs them in. An eager call
// (kolo.tensorflow sets `wait_inline_us`, the caller's thread waits for the
// op anyway) first waits that long in ComputeAsync and finishes there when
// the collective completes in time, or is under way by then (every rank
// submitted it), without a thread hand-off.
#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "proto/kolo/abi/types.h"
#include "python/src/kolo_py_api.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/platform/env.h"

namespace kolo::tf {
namespace {

using ::tensorflow::AsyncOpKernel;
using ::tensorflow::DataType;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::shape_inference::InferenceContext;

std::atomic<const KoloPyApi*> g_api{nullptr};

constexpr size_t kErrLen = 2048;

// A Kolo status as TensorFlow's: the codes share their values, so
// tf.errors raises the class of the same name with kolod's message.
absl::Status ToStatus(int code, const char* err) {
  if (code == 0) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(code), err);
}

// kolo::DType of a TensorFlow dtype (proto/kolo/abi/types.h, header only:
// this library links no libkolo); -1 for one Kolo does not carry.
int DTypeCode(DataType t) {
  switch (t) {
    case tensorflow::DT_UINT8:
      return static_cast<int>(DType::kUint8);
    case tensorflow::DT_INT8:
      return static_cast<int>(DType::kInt8);
    case tensorflow::DT_INT32:
      return static_cast<int>(DType::kInt32);
    case tensorflow::DT_INT64:
      return static_cast<int>(DType::kInt64);
    case tensorflow::DT_HALF:
      return static_cast<int>(DType::kFloat16);
    case tensorflow::DT_BFLOAT16:
      return static_cast<int>(DType::kBFloat16);
    case tensorflow::DT_FLOAT:
      return static_cast<int>(DType::kFloat32);
    case tensorflow::DT_DOUBLE:
      return static_cast<int>(DType::kFloat64);
    case tensorflow::DT_INT16:
      return static_cast<int>(DType::kInt16);
    case tensorflow::DT_BOOL:
      return static_cast<int>(DType::kBool);
    case tensorflow::DT_UINT16:
      return static_cast<int>(DType::kUint16);
    default:
      return -1;
  }
}

// kolo::CollectiveKind values, as the table's calls take them.
constexpr int kAllreduce = static_cast<int>(CollectiveKind::kAllreduce);
constexpr int kBroadcast = static_cast<int>(CollectiveKind::kBroadcast);
constexpr int kAllgather = static_cast<int>(CollectiveKind::kAllgather);
constexpr int kReducescatter = static_cast<int>(CollectiveKind::kReducescatter);
constexpr int kAlltoall = static_cast<int>(CollectiveKind::kAlltoall);

std::vector<int64_t> Dims(const Tensor& t) {
  std::vector<int64_t> dims;
  for (int i = 0; i < t.dims(); ++i) dims.push_back(t.dim_size(i));
  return dims;
}

// Non-null even for an empty tensor (libkolo checks data against size).
const void* DataOf(const Tensor& t) { return t.tensor_data().data(); }
void* MutableDataOf(Tensor* t) { return const_cast<char*>(t->tensor_data().data()); }

// Receives an allgather, reducescatter or alltoall result into outputs
// allocated once its shape is known.
struct OutputSink {
  OpKernelContext* ctx;
  absl::Status status;
  // The output to allocate; the received splits go to output 1 only for an
  // alltoall (with_splits).
  int index = 0;
  bool with_splits = false;

  static void* Allocate(void* self, const int64_t* shape, int ndim, const int64_t* splits,
                        int nsplits) {
    auto* sink = static_cast<OutputSink*>(self);
    TensorShape ts;
    for (int i = 0; i < ndim; ++i) ts.AddDim(shape[i]);
    Tensor* out = nullptr;
    sink->status = sink->ctx->allocate_output(sink->index, ts, &out);
    if (!sink->status.ok()) return nullptr;
    if (sink->with_splits) {
      Tensor* sp = nullptr;
      sink->status = sink->ctx->allocate_output(1, TensorShape({nsplits}), &sp);
      if (!sink->status.ok()) return nullptr;
      auto flat = sp->flat<int64_t>();
      for (int i = 0; i < nsplits; ++i) flat(i) = splits[i];
    }
    static char empty;
    return out->NumElements() == 0 ? &empty : MutableDataOf(out);
  }
};

// What every Kolo op shares: its collective name, process set and the table.
class KoloOp : public AsyncOpKernel {
 public:
  explicit KoloOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    std::string name;
    if (c->HasAttr("tensor_name")) OP_REQUIRES_OK(c, c->GetAttr("tensor_name", &name));
    // An unnamed op takes its node's name: unique in its graph and the same
    // on every rank that built the same graph.
    name_ = name.empty() ? c->def().name() : name;
    if (c->HasAttr("process_set")) OP_REQUIRES_OK(c, c->GetAttr("process_set", &process_set_));
    if (c->HasAttr("wait_inline_us")) {
      OP_REQUIRES_OK(c, c->GetAttr("wait_inline_us", &wait_inline_us_));
    }
  }

 protected:
  // The bound table, or fails the op when kolo.init() has not run.
  const KoloPyApi* Api(OpKernelContext* ctx) {
    const KoloPyApi* api = g_api.load(std::memory_order_acquire);
    if (api == nullptr || !api->initialized()) {
      ctx->SetStatus(
          absl::FailedPreconditionError("kolo is not initialized: call "
                                        "kolo.tensorflow.init() first"));
      return nullptr;
    }
    return api;
  }

  // Whether Kolo moves dtype `t`. If not, fails the op and refuses its
  // collectives (`names`, of kolo::CollectiveKind `kind`) on every rank, so
  // the other ranks' ops of those names fail too instead of waiting.
  bool CheckDType(OpKernelContext* ctx, const KoloPyApi* api, DataType t, int kind,
                  const std::vector<std::string>& names) const {
    if (DTypeCode(t) >= 0) return true;
    const std::string why = "kolo does not support dtype " + tensorflow::DataTypeString(t);
    for (const std::string& n : names) {
      char err[kErrLen] = {0};
      (void)api->refuse(kind, n.c_str(), process_set_, why.c_str(), err, sizeof(err));
    }
    ctx->SetStatus(absl::InvalidArgumentError(why));
    return false;
  }
  bool CheckDType(OpKernelContext* ctx, const KoloPyApi* api, DataType t, int kind) const {
    return CheckDType(ctx, api, t, kind, {name_});
  }

  // A group's inputs as the table takes them: member i is input i, named
  // "<op name>.i".
  struct GroupInputs {
    std::vector<std::string> names;
    std::vector<const char*> cnames;
    std::vector<const void*> data;
    std::vector<int> dtypes, ndims;
    std::vector<std::vector<int64_t>> dims;
    std::vector<const int64_t*> shapes;
    int size() const { return static_cast<int>(names.size()); }
  };

  // The op's inputs as a group of collective `kind`; false when one has a
  // dtype Kolo cannot move (the op failed, and every member is refused on
  // every rank).
  bool Group(OpKernelContext* ctx, const KoloPyApi* api, int kind, GroupInputs* g) const {
    const int n = ctx->num_inputs();
    for (int i = 0; i < n; ++i) g->names.push_back(name_ + "." + std::to_string(i));
    for (int i = 0; i < n; ++i) {
      if (!CheckDType(ctx, api, ctx->input(i).dtype(), kind, g->names)) return false;
    }
    g->dims.resize(n);
    for (int i = 0; i < n; ++i) {
      const Tensor& in = ctx->input(i);
      g->cnames.push_back(g->names[i].c_str());
      g->data.push_back(DataOf(in));
      g->dtypes.push_back(DTypeCode(in.dtype()));
      g->dims[i] = Dims(in);
      g->shapes.push_back(g->dims[i].data());
      g->ndims.push_back(static_cast<int>(g->dims[i].size()));
    }
    return true;
  }

  // Runs `finish` (which waits for `handles` and calls the op's done): here
  // when they complete within the op's `wait_inline_us`, or are under way
  // by then (set for eager calls, whose caller waits for the op anyway: no
  // thread hand-off), else on a thread of its own, so no TensorFlow pool
  // thread blocks on other ranks.
  template <typename Finish>
  void FinishWhenDone(const KoloPyApi* api, const std::vector<uint64_t>& handles,
                      Finish finish) const {
    if (wait_inline_us_ > 0 && ReadyWithin(api, handles, wait_inline_us_)) return finish();
    tensorflow::Env::Default()->SchedClosure(std::move(finish));
  }

  // Whether every handle completes within `budget_us`, or is under way
  // then: every rank submitted it, so it completes without a later op of
  // this rank's (a large tensor in parts, after its first part). An error
  // counts as complete: waiting reports it.
  static bool ReadyWithin(const KoloPyApi* api, const std::vector<uint64_t>& handles,
                          int64_t budget_us) {
    const uint64_t deadline = tensorflow::Env::Default()->NowMicros() + budget_us;
    for (uint64_t h : handles) {
      const uint64_t now = tensorflow::Env::Default()->NowMicros();
      const int64_t left = now >= deadline ? 0 : static_cast<int64_t>(deadline - now);
      int ready = 0;
      char err[kErrLen] = {0};
      if (api->test_for(h, left, &ready, err, sizeof(err)) != 0 || ready != 0) continue;
      int underway = 0;
      if (api->underway(h, &underway, err, sizeof(err)) == 0 && underway == 0) return false;
    }
    return true;
  }

  // Waits for `handle`, then finishes the op.
  void WaitThenDone(const KoloPyApi* api, OpKernelContext* ctx, uint64_t handle,
                    DoneCallback done) const {
    FinishWhenDone(api, {handle}, [api, ctx, handle, done = std::move(done)] {
      char err[kErrLen] = {0};
      int rc = api->wait(handle, err, sizeof(err));
      if (rc != 0) ctx->SetStatus(ToStatus(rc, err));
      done();
    });
  }

  // Waits for every handle of a group (no outputs to copy: allreduce), then
  // finishes the op with the first error.
  void WaitAllThenDone(const KoloPyApi* api, OpKernelContext* ctx, std::vector<uint64_t> handles,
                       DoneCallback done) const {
    FinishWhenDone(api, handles, [api, ctx, handles, done = std::move(done)] {
      for (uint64_t h : handles) {
        char err[kErrLen] = {0};
        int rc = api->wait(h, err, sizeof(err));
        if (rc != 0) ctx->SetStatus(ToStatus(rc, err));
      }
      done();
    });
  }

  void WaitOutputThenDone(const KoloPyApi* api, OpKernelContext* ctx, uint64_t handle,
                          bool alltoall, DoneCallback done) const {
    FinishWhenDone(api, {handle}, [api, ctx, handle, alltoall, done = std::move(done)] {
      WaitOutput(api, ctx, handle, 0, alltoall);
      done();
    });
  }

  // Waits for every handle of a group, output i from handles[i]; the op
  // fails with the first error (every handle is waited all the same).
  void WaitOutputsThenDone(const KoloPyApi* api, OpKernelContext* ctx,
                           std::vector<uint64_t> handles, DoneCallback done) const {
    FinishWhenDone(api, handles, [api, ctx, handles, done = std::move(done)] {
      for (size_t i = 0; i < handles.size(); ++i) {
        WaitOutput(api, ctx, handles[i], static_cast<int>(i), false);
      }
      done();
    });
  }

  // Output `index` from `handle`'s result; a failure goes to the op's status.
  static void WaitOutput(const KoloPyApi* api, OpKernelContext* ctx, uint64_t handle, int index,
                         bool alltoall) {
    char err[kErrLen] = {0};
    OutputSink sink{ctx, absl::OkStatus(), index, alltoall};
    int rc =
        api->wait_output(handle, alltoall ? 1 : 0, &OutputSink::Allocate, &sink, err, sizeof(err));
    if (!sink.status.ok()) {
      ctx->SetStatus(sink.status);
    } else if (rc != 0) {
      ctx->SetStatus(ToStatus(rc, err));
    }
  }

  std::string name_;
  int process_set_ = 0;
  int64_t wait_inline_us_ = 0;
};

#define KOLO_SUBMIT_OR_FAIL(ctx, rc, err, done) \
  if ((rc) != 0) {                              \
    (ctx)->SetStatus(ToStatus((rc), (err)));    \
    (done)();                                   \
    return;                                     \
  }

class AllreduceOp : public KoloOp {
 public:
  explicit AllreduceOp(OpKernelConstruction* c) : KoloOp(c) {
    OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &op_));
    OP_REQUIRES_OK(c, c->GetAttr("prescale_factor", &prescale_));
    OP_REQUIRES_OK(c, c->GetAttr("postscale_factor", &postscale_));
    OP_REQUIRES_OK(c, c->GetAttr("compression", &compression_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const KoloPyApi* api = Api(ctx);
    const Tensor& in = ctx->input(0);
    if (api == nullptr || !CheckDType(ctx, api, in.dtype(), kAllreduce)) return done();
    Tensor* out = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->allocate_output(0, in.shape(), &out), done);
    std::vector<int64_t> dims = Dims(in);
    char err[kErrLen] = {0};
    uint64_t h = 0;
    int rc =
        api->allreduce_async(DataOf(in), MutableDataOf(out), DTypeCode(in.dtype()), dims.data(),
                             static_cast<int>(dims.size()), name_.c_str(), op_, prescale_,
                             postscale_, compression_, process_set_, &h, err, sizeof(err));
    KOLO_SUBMIT_OR_FAIL(ctx, rc, err, done);
    WaitThenDone(api, ctx, h, std::move(done));
  }

 private:
  int op_ = 0;
  float prescale_ = 1.0f;
  float postscale_ = 1.0f;
  int compression_ = 0;
};

class GroupedAllreduceOp : public KoloOp {
 public:
  explicit GroupedAllreduceOp(OpKernelConstruction* c) : KoloOp(c) {
    OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &op_));
    OP_REQUIRES_OK(c, c->GetAttr("prescale_factor", &prescale_));
    OP_REQUIRES_OK(c, c->GetAttr("postscale_factor", &postscale_));
    OP_REQUIRES_OK(c, c->GetAttr("compression", &compression_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const KoloPyApi* api = Api(ctx);
    GroupInputs g;
    if (api == nullptr || !Group(ctx, api, kAllreduce, &g)) return done();
    const int n = g.size();
    std::vector<void*> outs(n);
    for (int i = 0; i < n; ++i) {
      Tensor* out = nullptr;
      OP_REQUIRES_OK_ASYNC(ctx, ctx->allocate_output(i, ctx->input(i).shape(), &out), done);
      outs[i] = MutableDataOf(out);
    }
    std::vector<uint64_t> handles(n);
    char err[kErrLen] = {0};
    int rc = api->grouped_allreduce_async(n, g.data.data(), outs.data(), g.dtypes.data(),
                                          g.shapes.data(), g.ndims.data(), g.cnames.data(), op_,
                                          prescale_, postscale_, compression_, process_set_,
                                          handles.data(), err, sizeof(err));
    KOLO_SUBMIT_OR_FAIL(ctx, rc, err, done);
    WaitAllThenDone(api, ctx, std::move(handles), std::move(done));
  }

 private:
  int op_ = 0;
  float prescale_ = 1.0f;
  float postscale_ = 1.0f;
  int compression_ = 0;
};

class BroadcastOp : public KoloOp {
 public:
  explicit BroadcastOp(OpKernelConstruction* c) : KoloOp(c) {
    OP_REQUIRES_OK(c, c->GetAttr("root_rank", &root_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const KoloPyApi* api = Api(ctx);
    const Tensor& in = ctx->input(0);
    if (api == nullptr || !CheckDType(ctx, api, in.dtype(), kBroadcast)) return done();
    Tensor* out = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->allocate_output(0, in.shape(), &out), done);
    if (in.NumElements() > 0) {
      std::memcpy(MutableDataOf(out), DataOf(in), in.TotalBytes());
    }
    std::vector<int64_t> dims = Dims(in);
    char err[kErrLen] = {0};
    uint64_t h = 0;
    int rc = api->broadcast_async(MutableDataOf(out), DTypeCode(in.dtype()), dims.data(),
                                  static_cast<int>(dims.size()), name_.c_str(), root_, process_set_,
                                  &h, err, sizeof(err));
    KOLO_SUBMIT_OR_FAIL(ctx, rc, err, done);
    WaitThenDone(api, ctx, h, std::move(done));
  }

 private:
  int root_ = 0;
};

class AllgatherOp : public KoloOp {
 public:
  using KoloOp::KoloOp;

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const KoloPyApi* api = Api(ctx);
    const Tensor& in = ctx->input(0);
    // A scalar is refused by libkolo, which tells the other ranks.
    if (api == nullptr || !CheckDType(ctx, api, in.dtype(), kAllgather)) return done();
    std::vector<int64_t> dims = Dims(in);
    char err[kErrLen] = {0};
    uint64_t h = 0;
    int rc = api->allgather_async(DataOf(in), DTypeCode(in.dtype()), dims.data(),
                                  static_cast<int>(dims.size()), name_.c_str(), process_set_, &h,
                                  err, sizeof(err));
    KOLO_SUBMIT_OR_FAIL(ctx, rc, err, done);
    WaitOutputThenDone(api, ctx, h, false, std::move(done));
  }
};

class ReducescatterOp : public KoloOp {
 public:
  explicit ReducescatterOp(OpKernelConstruction* c) : KoloOp(c) {
    OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &op_));
    OP_REQUIRES_OK(c, c->GetAttr("prescale_factor", &prescale_));
    OP_REQUIRES_OK(c, c->GetAttr("postscale_factor", &postscale_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const KoloPyApi* api = Api(ctx);
    const Tensor& in = ctx->input(0);
    if (api == nullptr || !CheckDType(ctx, api, in.dtype(), kReducescatter)) return done();
    std::vector<int64_t> dims = Dims(in);
    char err[kErrLen] = {0};
    uint64_t h = 0;
    int rc = api->reducescatter_async(DataOf(in), DTypeCode(in.dtype()), dims.data(),
                                      static_cast<int>(dims.size()), name_.c_str(), op_, prescale_,
                                      postscale_, process_set_, &h, err, sizeof(err));
    KOLO_SUBMIT_OR_FAIL(ctx, rc, err, done);
    WaitOutputThenDone(api, ctx, h, false, std::move(done));
  }

 private:
  int op_ = 1;
  float prescale_ = 1.0f;
  float postscale_ = 1.0f;
};

class AlltoallOp : public KoloOp {
 public:
  using KoloOp::KoloOp;

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const KoloPyApi* api = Api(ctx);
    const Tensor& in = ctx->input(0);
    const Tensor& splits = ctx->input(1);
    if (api == nullptr || !CheckDType(ctx, api, in.dtype(), kAlltoall)) return done();
    std::vector<int64_t> sp;
    auto flat = splits.flat<int64_t>();
    for (int64_t i = 0; i < flat.size(); ++i) sp.push_back(flat(i));
    std::vector<int64_t> dims = Dims(in);
    char err[kErrLen] = {0};
    uint64_t h = 0;
    int rc = api->alltoall_async(
        DataOf(in), DTypeCode(in.dtype()), dims.data(), static_cast<int>(dims.size()), sp.data(),
        static_cast<int>(sp.size()), name_.c_str(), process_set_, &h, err, sizeof(err));
    KOLO_SUBMIT_OR_FAIL(ctx, rc, err, done);
    WaitOutputThenDone(api, ctx, h, true, std::move(done));
  }
};

// Several tensors gathered (or reduced and scattered) as one negotiated,
// fused group: member i is named "<op name>.i" and fills output i.
class GroupedOutputOp : public KoloOp {
 public:
  GroupedOutputOp(OpKernelConstruction* c, int kind) : KoloOp(c), kind_(kind) {
    if (kind_ == kReducescatter) {
      OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &op_));
      OP_REQUIRES_OK(c, c->GetAttr("prescale_factor", &prescale_));
      OP_REQUIRES_OK(c, c->GetAttr("postscale_factor", &postscale_));
    }
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const KoloPyApi* api = Api(ctx);
    GroupInputs g;
    if (api == nullptr || !Group(ctx, api, kind_, &g)) return done();
    const int n = g.size();
    std::vector<uint64_t> handles(n);
    char err[kErrLen] = {0};
    const int rc = kind_ == kAllgather
                       ? api->grouped_allgather_async(
                             n, g.data.data(), g.dtypes.data(), g.shapes.data(), g.ndims.data(),
                             g.cnames.data(), process_set_, handles.data(), err, sizeof(err))
                       : api->grouped_reducescatter_async(
                             n, g.data.data(), g.dtypes.data(), g.shapes.data(), g.ndims.data(),
                             g.cnames.data(), op_, prescale_, postscale_, process_set_,
                             handles.data(), err, sizeof(err));
    KOLO_SUBMIT_OR_FAIL(ctx, rc, err, done);
    WaitOutputsThenDone(api, ctx, std::move(handles), std::move(done));
  }

 private:
  const int kind_;
  int op_ = 1;
  float prescale_ = 1.0f;
  float postscale_ = 1.0f;
};

class GroupedAllgatherOp : public GroupedOutputOp {
 public:
  explicit GroupedAllgatherOp(OpKernelConstruction* c) : GroupedOutputOp(c, kAllgather) {}
};

class GroupedReducescatterOp : public GroupedOutputOp {
 public:
  explicit GroupedReducescatterOp(OpKernelConstruction* c) : GroupedOutputOp(c, kReducescatter) {}
};

class BarrierOp : public KoloOp {
 public:
  using KoloOp::KoloOp;

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const KoloPyApi* api = Api(ctx);
    if (api == nullptr) return done();
    const int ps = process_set_;
    tensorflow::Env::Default()->SchedClosure([api, ctx, ps, done = std::move(done)] {
      char err[kErrLen] = {0};
      int rc = api->barrier(ps, err, sizeof(err));
      if (rc != 0) ctx->SetStatus(ToStatus(rc, err));
      done();
    });
  }
};

class JoinOp : public KoloOp {
 public:
  using KoloOp::KoloOp;

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const KoloPyApi* api = Api(ctx);
    if (api == nullptr) return done();
    Tensor* out = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->allocate_output(0, TensorShape({}), &out), done);
    tensorflow::Env::Default()->SchedClosure([api, ctx, out, done = std::move(done)] {
      char err[kErrLen] = {0};
      int last = -1;
      int rc = api->join(&last, err, sizeof(err));
      if (rc != 0) ctx->SetStatus(ToStatus(rc, err));
      out->scalar<int32_t>()() = last;
      done();
    });
  }
};

// Output i is input i's shape with an unknown first dimension.
absl::Status FirstDimUnknownAt(InferenceContext* c, int i) {
  tensorflow::shape_inference::ShapeHandle out;
  if (c->RankKnown(c->input(i)) && c->Rank(c->input(i)) > 0) {
    TF_RETURN_IF_ERROR(c->ReplaceDim(c->input(i), 0, c->UnknownDim(), &out));
  } else {
    out = c->UnknownShape();
  }
  c->set_output(i, out);
  return absl::OkStatus();
}

absl::Status FirstDimUnknown(InferenceContext* c) { return FirstDimUnknownAt(c, 0); }

// Every dtype reaches the kernel, which refuses those Kolo cannot move on
// every rank (CheckDType): a type constraint here would fail the op on one
// rank only, while the others wait for it.
#define KOLO_TYPES "type"

REGISTER_OP("KoloAllreduce")
    .Attr("T: " KOLO_TYPES)
    .Attr("tensor_name: string = ''")
    .Attr("reduce_op: int = 1")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("compression: int = 0")
    .Attr("process_set: int = 0")
    .Attr("wait_inline_us: int = 0")
    .Input("tensor: T")
    .Output("output: T")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(0));
      return absl::OkStatus();
    });

REGISTER_OP("KoloGroupedAllreduce")
    .Attr("T: list(type)")
    .Attr("tensor_name: string = ''")
    .Attr("reduce_op: int = 1")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("compression: int = 0")
    .Attr("process_set: int = 0")
    .Attr("wait_inline_us: int = 0")
    .Input("tensors: T")
    .Output("outputs: T")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      for (int i = 0; i < c->num_inputs(); ++i) c->set_output(i, c->input(i));
      return absl::OkStatus();
    });

REGISTER_OP("KoloBroadcast")
    .Attr("T: " KOLO_TYPES)
    .Attr("tensor_name: string = ''")
    .Attr("root_rank: int")
    .Attr("process_set: int = 0")
    .Attr("wait_inline_us: int = 0")
    .Input("tensor: T")
    .Output("output: T")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(0));
      return absl::OkStatus();
    });

REGISTER_OP("KoloAllgather")
    .Attr("T: " KOLO_TYPES)
    .Attr("tensor_name: string = ''")
    .Attr("process_set: int = 0")
    .Attr("wait_inline_us: int = 0")
    .Input("tensor: T")
    .Output("output: T")
    .SetIsStateful()
    .SetShapeFn(FirstDimUnknown);

// Outputs like KoloAllgather's, one per input.
absl::Status GroupFirstDimsUnknown(InferenceContext* c) {
  for (int i = 0; i < c->num_inputs(); ++i) TF_RETURN_IF_ERROR(FirstDimUnknownAt(c, i));
  return absl::OkStatus();
}

REGISTER_OP("KoloGroupedAllgather")
    .Attr("T: list(type)")
    .Attr("tensor_name: string = ''")
    .Attr("process_set: int = 0")
    .Attr("wait_inline_us: int = 0")
    .Input("tensors: T")
    .Output("outputs: T")
    .SetIsStateful()
    .SetShapeFn(GroupFirstDimsUnknown);

REGISTER_OP("KoloGroupedReducescatter")
    .Attr("T: list(type)")
    .Attr("tensor_name: string = ''")
    .Attr("reduce_op: int = 1")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("process_set: int = 0")
    .Attr("wait_inline_us: int = 0")
    .Input("tensors: T")
    .Output("outputs: T")
    .SetIsStateful()
    .SetShapeFn(GroupFirstDimsUnknown);

REGISTER_OP("KoloReducescatter")
    .Attr("T: " KOLO_TYPES)
    .Attr("tensor_name: string = ''")
    .Attr("reduce_op: int = 1")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("process_set: int = 0")
    .Attr("wait_inline_us: int = 0")
    .Input("tensor: T")
    .Output("output: T")
    .SetIsStateful()
    .SetShapeFn(FirstDimUnknown);

REGISTER_OP("KoloAlltoall")
    .Attr("T: " KOLO_TYPES)
    .Attr("tensor_name: string = ''")
    .Attr("process_set: int = 0")
    .Attr("wait_inline_us: int = 0")
    .Input("tensor: T")
    .Input("splits: int64")
    .Output("output: T")
    .Output("received_splits: int64")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      TF_RETURN_IF_ERROR(FirstDimUnknown(c));
      c->set_output(1, c->Vector(c->UnknownDim()));
      return absl::OkStatus();
    });

REGISTER_OP("KoloBarrier")
    .Attr("process_set: int = 0")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext*) { return absl::OkStatus(); });

REGISTER_OP("KoloJoin")
    .Output("last_rank: int32")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->Scalar());
      return absl::OkStatus();
    });

REGISTER_KERNEL_BUILDER(Name("KoloAllreduce").Device(tensorflow::DEVICE_CPU), AllreduceOp);
REGISTER_KERNEL_BUILDER(Name("KoloGroupedAllreduce").Device(tensorflow::DEVICE_CPU),
                        GroupedAllreduceOp);
REGISTER_KERNEL_BUILDER(Name("KoloBroadcast").Device(tensorflow::DEVICE_CPU), BroadcastOp);
REGISTER_KERNEL_BUILDER(Name("KoloAllgather").Device(tensorflow::DEVICE_CPU), AllgatherOp);
REGISTER_KERNEL_BUILDER(Name("KoloReducescatter").Device(tensorflow::DEVICE_CPU), ReducescatterOp);
REGISTER_KERNEL_BUILDER(Name("KoloAlltoall").Device(tensorflow::DEVICE_CPU), AlltoallOp);
REGISTER_KERNEL_BUILDER(Name("KoloGroupedAllgather").Device(tensorflow::DEVICE_CPU),
                        GroupedAllgatherOp);
REGISTER_KERNEL_BUILDER(Name("KoloGroupedReducescatter").Device(tensorflow::DEVICE_CPU),
                        GroupedReducescatterOp);
REGISTER_KERNEL_BUILDER(Name("KoloBarrier").Device(tensorflow::DEVICE_CPU), BarrierOp);
REGISTER_KERNEL_BUILDER(Name("KoloJoin").Device(tensorflow::DEVICE_CPU), JoinOp);

}  // namespace
}  // namespace kolo::tf

// Hands the op library kolo._core's table (kolo/tensorflow/_ops.py calls it
// right after loading). 0 on success, -1 for a table of another version.
extern "C" __attribute__((visibility("default"))) int kolo_tf_bind(const void* table) {
  const auto* api = static_cast<const KoloPyApi*>(table);
  if (api == nullptr || api->version != KOLO_PY_API_VERSION ||
      api->struct_size < sizeof(KoloPyApi)) {
    return -1;
  }
  kolo::tf::g_api.store(api, std::memory_order_release);
  return 0;
}
