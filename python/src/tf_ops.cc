// Kolo's collectives as TensorFlow ops (CPU tensors), so they run inside
// tf.function graphs with no Python in the path.
//
// Built against the installed TensorFlow's headers (and so its Abseil and
// protobuf), not against libkolo: every call goes through the KoloPyApiV1
// table that kolo._core hands over with kolo_tf_bind() once loaded, so the
// two never share a C++ type or a library (see kolo/_native.py).
//
// Each op is an AsyncOpKernel: ComputeAsync submits the collective and a
// closure on a thread of its own waits for it and calls `done`, so no TF
// thread pool thread blocks on other ranks and any number of collectives can
// be in flight at once, whatever order the graph runs them in.
#include <atomic>
#include <cstring>
#include <string>
#include <vector>

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

std::atomic<const KoloPyApiV1*> g_api{nullptr};

constexpr size_t kErrLen = 2048;

// A Kolo status as TensorFlow's: the codes share their values, so
// tf.errors raises the class of the same name with kolod's message.
absl::Status ToStatus(int code, const char* err) {
  if (code == 0) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(code), err);
}

int DTypeCode(DataType t) {
  switch (t) {
    case tensorflow::DT_UINT8:
      return 0;
    case tensorflow::DT_INT8:
      return 1;
    case tensorflow::DT_INT32:
      return 2;
    case tensorflow::DT_INT64:
      return 3;
    case tensorflow::DT_HALF:
      return 4;
    case tensorflow::DT_BFLOAT16:
      return 5;
    case tensorflow::DT_FLOAT:
      return 6;
    case tensorflow::DT_DOUBLE:
      return 7;
    case tensorflow::DT_INT16:
      return 8;
    case tensorflow::DT_BOOL:
      return 9;
    case tensorflow::DT_UINT16:
      return 10;
    default:
      return -1;
  }
}

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
  Tensor* splits_out = nullptr;

  static void* Allocate(void* self, const int64_t* shape, int ndim, const int64_t* splits,
                        int nsplits) {
    auto* sink = static_cast<OutputSink*>(self);
    TensorShape ts;
    for (int i = 0; i < ndim; ++i) ts.AddDim(shape[i]);
    Tensor* out = nullptr;
    sink->status = sink->ctx->allocate_output(0, ts, &out);
    if (!sink->status.ok()) return nullptr;
    if (sink->ctx->num_outputs() > 1) {
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
  }

 protected:
  // The bound table, or fails the op when kolo.init() has not run.
  const KoloPyApiV1* Api(OpKernelContext* ctx) {
    const KoloPyApiV1* api = g_api.load(std::memory_order_acquire);
    if (api == nullptr || !api->initialized()) {
      ctx->SetStatus(
          absl::FailedPreconditionError("kolo is not initialized: call "
                                        "kolo.tensorflow.init() first"));
      return nullptr;
    }
    return api;
  }

  static bool CheckDType(OpKernelContext* ctx, DataType t) {
    if (DTypeCode(t) >= 0) return true;
    ctx->SetStatus(
        absl::InvalidArgumentError("kolo does not support dtype " + tensorflow::DataTypeString(t)));
    return false;
  }

  // Waits for `handle` on a thread of its own, then finishes the op.
  static void WaitThenDone(const KoloPyApiV1* api, OpKernelContext* ctx, uint64_t handle,
                           DoneCallback done) {
    tensorflow::Env::Default()->SchedClosure([api, ctx, handle, done = std::move(done)] {
      char err[kErrLen] = {0};
      int rc = api->wait(handle, err, sizeof(err));
      if (rc != 0) ctx->SetStatus(ToStatus(rc, err));
      done();
    });
  }

  static void WaitOutputThenDone(const KoloPyApiV1* api, OpKernelContext* ctx, uint64_t handle,
                                 bool alltoall, DoneCallback done) {
    tensorflow::Env::Default()->SchedClosure([api, ctx, handle, alltoall, done = std::move(done)] {
      char err[kErrLen] = {0};
      OutputSink sink{ctx, absl::OkStatus()};
      int rc = api->wait_output(handle, alltoall ? 1 : 0, &OutputSink::Allocate, &sink, err,
                                sizeof(err));
      if (!sink.status.ok()) {
        ctx->SetStatus(sink.status);
      } else if (rc != 0) {
        ctx->SetStatus(ToStatus(rc, err));
      }
      done();
    });
  }

  std::string name_;
  int process_set_ = 0;
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
    const KoloPyApiV1* api = Api(ctx);
    const Tensor& in = ctx->input(0);
    if (api == nullptr || !CheckDType(ctx, in.dtype())) return done();
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
    const KoloPyApiV1* api = Api(ctx);
    if (api == nullptr) return done();
    const int n = ctx->num_inputs();
    std::vector<const void*> ins(n);
    std::vector<void*> outs(n);
    std::vector<int> dtypes(n), ndims(n);
    std::vector<std::vector<int64_t>> dims(n);
    std::vector<const int64_t*> shapes(n);
    std::vector<std::string> names(n);
    std::vector<const char*> cnames(n);
    for (int i = 0; i < n; ++i) {
      const Tensor& in = ctx->input(i);
      if (!CheckDType(ctx, in.dtype())) return done();
      Tensor* out = nullptr;
      OP_REQUIRES_OK_ASYNC(ctx, ctx->allocate_output(i, in.shape(), &out), done);
      ins[i] = DataOf(in);
      outs[i] = MutableDataOf(out);
      dtypes[i] = DTypeCode(in.dtype());
      dims[i] = Dims(in);
      shapes[i] = dims[i].data();
      ndims[i] = static_cast<int>(dims[i].size());
      names[i] = name_ + "." + std::to_string(i);
      cnames[i] = names[i].c_str();
    }
    std::vector<uint64_t> handles(n);
    char err[kErrLen] = {0};
    int rc = api->grouped_allreduce_async(
        n, ins.data(), outs.data(), dtypes.data(), shapes.data(), ndims.data(), cnames.data(), op_,
        prescale_, postscale_, compression_, process_set_, handles.data(), err, sizeof(err));
    KOLO_SUBMIT_OR_FAIL(ctx, rc, err, done);
    tensorflow::Env::Default()->SchedClosure([api, ctx, handles, done = std::move(done)] {
      for (uint64_t h : handles) {
        char werr[kErrLen] = {0};
        int wrc = api->wait(h, werr, sizeof(werr));
        if (wrc != 0) ctx->SetStatus(ToStatus(wrc, werr));
      }
      done();
    });
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
    const KoloPyApiV1* api = Api(ctx);
    const Tensor& in = ctx->input(0);
    if (api == nullptr || !CheckDType(ctx, in.dtype())) return done();
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
    const KoloPyApiV1* api = Api(ctx);
    const Tensor& in = ctx->input(0);
    if (api == nullptr || !CheckDType(ctx, in.dtype())) return done();
    OP_REQUIRES_ASYNC(ctx, in.dims() >= 1,
                      absl::InvalidArgumentError("allgather needs a tensor of rank >= 1"), done);
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
    const KoloPyApiV1* api = Api(ctx);
    const Tensor& in = ctx->input(0);
    if (api == nullptr || !CheckDType(ctx, in.dtype())) return done();
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
    const KoloPyApiV1* api = Api(ctx);
    const Tensor& in = ctx->input(0);
    const Tensor& splits = ctx->input(1);
    if (api == nullptr || !CheckDType(ctx, in.dtype())) return done();
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

class BarrierOp : public KoloOp {
 public:
  using KoloOp::KoloOp;

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const KoloPyApiV1* api = Api(ctx);
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
    const KoloPyApiV1* api = Api(ctx);
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

absl::Status FirstDimUnknown(InferenceContext* c) {
  tensorflow::shape_inference::ShapeHandle out;
  if (c->RankKnown(c->input(0)) && c->Rank(c->input(0)) > 0) {
    TF_RETURN_IF_ERROR(c->ReplaceDim(c->input(0), 0, c->UnknownDim(), &out));
  } else {
    out = c->UnknownShape();
  }
  c->set_output(0, out);
  return absl::OkStatus();
}

#define KOLO_TYPES "{uint8, int8, int16, uint16, int32, int64, half, bfloat16, float, double, bool}"

REGISTER_OP("KoloAllreduce")
    .Attr("T: " KOLO_TYPES)
    .Attr("tensor_name: string = ''")
    .Attr("reduce_op: int = 1")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("compression: int = 0")
    .Attr("process_set: int = 0")
    .Input("tensor: T")
    .Output("output: T")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(0));
      return absl::OkStatus();
    });

REGISTER_OP("KoloGroupedAllreduce")
    .Attr("T: list(" KOLO_TYPES ")")
    .Attr("tensor_name: string = ''")
    .Attr("reduce_op: int = 1")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("compression: int = 0")
    .Attr("process_set: int = 0")
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
    .Input("tensor: T")
    .Output("output: T")
    .SetIsStateful()
    .SetShapeFn(FirstDimUnknown);

REGISTER_OP("KoloReducescatter")
    .Attr("T: " KOLO_TYPES)
    .Attr("tensor_name: string = ''")
    .Attr("reduce_op: int = 1")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("process_set: int = 0")
    .Input("tensor: T")
    .Output("output: T")
    .SetIsStateful()
    .SetShapeFn(FirstDimUnknown);

REGISTER_OP("KoloAlltoall")
    .Attr("T: " KOLO_TYPES)
    .Attr("tensor_name: string = ''")
    .Attr("process_set: int = 0")
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
REGISTER_KERNEL_BUILDER(Name("KoloBarrier").Device(tensorflow::DEVICE_CPU), BarrierOp);
REGISTER_KERNEL_BUILDER(Name("KoloJoin").Device(tensorflow::DEVICE_CPU), JoinOp);

}  // namespace
}  // namespace kolo::tf

// Hands the op library kolo._core's table (kolo/tensorflow/_ops.py calls it
// right after loading). 0 on success, -1 for a table of another version.
extern "C" __attribute__((visibility("default"))) int kolo_tf_bind(const void* table) {
  const auto* api = static_cast<const KoloPyApiV1*>(table);
  if (api == nullptr || api->version != KOLO_PY_API_VERSION ||
      api->struct_size < sizeof(KoloPyApiV1)) {
    return -1;
  }
  kolo::tf::g_api.store(api, std::memory_order_release);
  return 0;
}
