// Kolo's collectives as TensorFlow ops (CPU tensors), so they run inside
// tf.function graphs with no Python in the path.
//
// Built against the installed TensorFlow's headers (and so its Abseil and
// protobuf), not against libkolo: every call goes through the KoloPyApi
// table that kolo._core hands over with kolo_tf_bind() once loaded, so the
// two never share a C++ type or a library (see kolo/_native.py).
//
// Every op is one AsyncOpKernel template, KoloOp<Policy>, over a small
// policy per collective (its attributes, inputs, outputs and submission):
// ComputeAsync submits the collective, and a closure on a thread of its own
// waits for it and calls `done`, so no TF thread pool thread blocks on other
// ranks and any number of collectives can be in flight at once, whatever
// order the graph runs them in. An eager call (kolo.tensorflow sets
// `wait_inline_us`, the caller's thread waits for the op anyway) first waits
// that long in ComputeAsync and finishes there when the collective completes
// in time, or is under way by then (every rank submitted it), without a
// thread hand-off.
#include <atomic>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
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
  static constexpr std::pair<DataType, DType> kCodes[] = {
      {tensorflow::DT_UINT8, DType::kUint8},   {tensorflow::DT_INT8, DType::kInt8},
      {tensorflow::DT_INT32, DType::kInt32},   {tensorflow::DT_INT64, DType::kInt64},
      {tensorflow::DT_HALF, DType::kFloat16},  {tensorflow::DT_BFLOAT16, DType::kBFloat16},
      {tensorflow::DT_FLOAT, DType::kFloat32}, {tensorflow::DT_DOUBLE, DType::kFloat64},
      {tensorflow::DT_INT16, DType::kInt16},   {tensorflow::DT_BOOL, DType::kBool},
      {tensorflow::DT_UINT16, DType::kUint16},
  };
  for (const auto& [tf, kolo] : kCodes) {
    if (tf == t) return static_cast<int>(kolo);
  }
  return -1;
}

// kolo::CollectiveKind values, as the table's calls take them.
constexpr int kAllreduce = static_cast<int>(CollectiveKind::kAllreduce);
constexpr int kBroadcast = static_cast<int>(CollectiveKind::kBroadcast);
constexpr int kAllgather = static_cast<int>(CollectiveKind::kAllgather);
constexpr int kReducescatter = static_cast<int>(CollectiveKind::kReducescatter);
constexpr int kAlltoall = static_cast<int>(CollectiveKind::kAlltoall);
// Barrier and join move no tensors, so they refuse none.
constexpr int kNoCollective = -1;

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

// Every op's tensors as the table takes them: tensor i is input i, named
// after the op (a group's member i "<op name>.i"), and output i where the op
// allocates its outputs before it submits.
struct Tensors {
  std::vector<std::string> names;
  std::vector<const char*> cnames;
  std::vector<const void*> data;
  std::vector<void*> outs;
  std::vector<int> dtypes, ndims;
  std::vector<std::vector<int64_t>> dims;
  std::vector<const int64_t*> shapes;
  int size() const { return static_cast<int>(names.size()); }
};

// Which of an op's inputs its collective moves.
enum class Inputs {
  kNone,   // barrier, join
  kFirst,  // one tensor, input 0, named after the op (alltoall's input 1 is its splits)
  kGroup,  // every input, one negotiated group
};

// How an op finishes once submitted.
enum class Finish {
  kWait,          // waits for each handle: the outputs were written in place
  kWaitOutput,    // output i from handle i's result, allocated once its shape is known
  kWaitAlltoall,  // output 0 from the result, the rows received from each rank to output 1
  kBlocking,      // no handle: the policy's Call blocks, on a thread of its own
};

// The attributes every op may have: its collective name, process set and
// how long an eager call waits inline.
struct OpAttrs {
  std::string name;
  int process_set = 0;
  int64_t wait_inline_us = 0;

  explicit OpAttrs(OpKernelConstruction* c) {
    if (c->HasAttr("tensor_name")) OP_REQUIRES_OK(c, c->GetAttr("tensor_name", &name));
    // An unnamed op takes its node's name: unique in its graph and the same
    // on every rank that built the same graph.
    if (name.empty()) name = c->def().name();
    if (c->HasAttr("process_set")) OP_REQUIRES_OK(c, c->GetAttr("process_set", &process_set));
    if (c->HasAttr("wait_inline_us")) {
      OP_REQUIRES_OK(c, c->GetAttr("wait_inline_us", &wait_inline_us));
    }
  }
};

// reduce_op, prescale_factor, postscale_factor and, for an allreduce,
// compression.
struct ReduceAttrs {
  int op = 1;
  float prescale = 1.0f;
  float postscale = 1.0f;
  int compression = 0;

  ReduceAttrs(OpKernelConstruction* c, bool with_compression) {
    OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &op));
    OP_REQUIRES_OK(c, c->GetAttr("prescale_factor", &prescale));
    OP_REQUIRES_OK(c, c->GetAttr("postscale_factor", &postscale));
    if (with_compression) OP_REQUIRES_OK(c, c->GetAttr("compression", &compression));
  }
};

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

// The names this process refused lately, by process set, with when. kolod
// keeps a refused name in flight until every rank has reported it (a peer
// may refuse it too, a little later): a retry of the name that reaches
// kolod first is refused as a duplicate (AlreadyExists), and is submitted
// again until the peers' reports have ended the refused round.
class RecentRefusals {
 public:
  static constexpr int64_t kRetryForUs = 30 * 1000 * 1000;

  void Add(int process_set, const std::string& name) {
    std::lock_guard<std::mutex> l(mu_);
    if (at_.size() > 4096) at_.clear();  // a bound, not a cache
    at_[{process_set, name}] = tensorflow::Env::Default()->NowMicros();
  }
  // Whether a duplicate of `name` may be the refused round still in flight.
  bool Retry(int process_set, const std::string& name) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = at_.find({process_set, name});
    if (it == at_.end()) return false;
    if (tensorflow::Env::Default()->NowMicros() - it->second < kRetryForUs) return true;
    at_.erase(it);
    return false;
  }
  void Forget(int process_set, const std::string& name) {
    std::lock_guard<std::mutex> l(mu_);
    at_.erase({process_set, name});
  }

 private:
  std::mutex mu_;
  std::map<std::pair<int, std::string>, uint64_t> at_;
};

RecentRefusals& Refusals() {
  static RecentRefusals* r = new RecentRefusals();
  return *r;
}

// Whether Kolo moves the dtype of every tensor the op moves. If not, fails
// the op and refuses its collectives (every name in `t`, of kolo::
// CollectiveKind `kind`) on every rank, so the other ranks' ops of those
// names fail too instead of waiting.
bool CheckDTypes(OpKernelContext* ctx, const KoloPyApi* api, int kind, int process_set,
                 const Tensors& t) {
  for (int i = 0; i < t.size(); ++i) {
    const DataType dt = ctx->input(i).dtype();
    if (DTypeCode(dt) >= 0) continue;
    const std::string why = "kolo does not support dtype " + tensorflow::DataTypeString(dt);
    for (const std::string& n : t.names) {
      char err[kErrLen] = {0};
      (void)api->refuse(kind, n.c_str(), process_set, why.c_str(), err, sizeof(err));
      Refusals().Add(process_set, n);
    }
    ctx->SetStatus(absl::InvalidArgumentError(why));
    return false;
  }
  return true;
}

// The tensors `which` of the op's inputs, as the table takes them; false
// when one has a dtype Kolo cannot move (the op failed, and every one is
// refused on every rank).
bool CollectInputs(OpKernelContext* ctx, const KoloPyApi* api, int kind, Inputs which,
                   const OpAttrs& attrs, Tensors* t) {
  const int n = which == Inputs::kNone ? 0 : which == Inputs::kFirst ? 1 : ctx->num_inputs();
  for (int i = 0; i < n; ++i) {
    t->names.push_back(which == Inputs::kGroup ? attrs.name + "." + std::to_string(i) : attrs.name);
  }
  if (!CheckDTypes(ctx, api, kind, attrs.process_set, *t)) return false;
  t->dims.resize(n);
  for (int i = 0; i < n; ++i) {
    const Tensor& in = ctx->input(i);
    t->cnames.push_back(t->names[i].c_str());
    t->data.push_back(DataOf(in));
    t->dtypes.push_back(DTypeCode(in.dtype()));
    t->dims[i] = Dims(in);
    t->shapes.push_back(t->dims[i].data());
    t->ndims.push_back(static_cast<int>(t->dims[i].size()));
  }
  return true;
}

// Whether every handle completes within `budget_us`, or is under way then:
// every rank submitted it, so it completes without a later op of this
// rank's (a large tensor in parts, after its first part). An error counts
// as complete: waiting reports it.
bool ReadyWithin(const KoloPyApi* api, const std::vector<uint64_t>& handles, int64_t budget_us) {
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

// Waits for `handle`: output `index` from its result where the op takes
// its outputs from the results (`finish`); its error, or OK.
absl::Status WaitOne(const KoloPyApi* api, OpKernelContext* ctx, uint64_t handle, int index,
                     Finish finish) {
  char err[kErrLen] = {0};
  if (finish == Finish::kWait) return ToStatus(api->wait(handle, err, sizeof(err)), err);
  const bool alltoall = finish == Finish::kWaitAlltoall;
  OutputSink sink{ctx, absl::OkStatus(), index, alltoall};
  const int rc =
      api->wait_output(handle, alltoall ? 1 : 0, &OutputSink::Allocate, &sink, err, sizeof(err));
  if (!sink.status.ok()) return sink.status;
  return ToStatus(rc, err);
}

// Waits for every handle; the op fails with the first error, and every
// handle is waited all the same.
void Complete(const KoloPyApi* api, OpKernelContext* ctx, const std::vector<uint64_t>& handles,
              Finish finish) {
  for (size_t i = 0; i < handles.size(); ++i) {
    absl::Status s = WaitOne(api, ctx, handles[i], static_cast<int>(i), finish);
    if (!s.ok()) ctx->SetStatus(s);
  }
}

// Waits for every handle, dropping its result or error, and fails the op
// with `why`: an error the policy found before the op was submitted.
void FailWhenComplete(const KoloPyApi* api, OpKernelContext* ctx,
                      const std::vector<uint64_t>& handles, Finish finish, const std::string& why) {
  for (size_t i = 0; i < handles.size(); ++i) {
    (void)WaitOne(api, ctx, handles[i], static_cast<int>(i), finish);
  }
  ctx->SetStatus(absl::InvalidArgumentError(why));
}

// Whether policy P checks its inputs itself (P::LocalError: why the op
// must fail, or "").
template <typename P, typename = void>
struct HasLocalError : std::false_type {};
template <typename P>
struct HasLocalError<P, std::void_t<decltype(&P::LocalError)>> : std::true_type {};

// Every Kolo op: a policy P (one per collective) says which attributes
// beyond OpAttrs it reads (its constructor), which inputs it moves
// (P::kInputs, of collective P::kKind), which outputs it allocates before
// it submits (P::Outputs), how it submits (P::Submit, or P::Call for a
// blocking one) and how it finishes (P::kFinish). The rest is here, once.
template <typename P>
class KoloOp : public AsyncOpKernel {
 public:
  explicit KoloOp(OpKernelConstruction* c) : AsyncOpKernel(c), attrs_(c), policy_(MakePolicy(c)) {}

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const KoloPyApi* api = Api(ctx);
    Tensors t;
    if (api == nullptr || !CollectInputs(ctx, api, P::kKind, P::kInputs, attrs_, &t)) {
      return done();
    }
    OP_REQUIRES_OK_ASYNC(ctx, policy_.Outputs(ctx, &t), done);
    if constexpr (P::kFinish == Finish::kBlocking) {
      const int ps = attrs_.process_set;
      tensorflow::Env::Default()->SchedClosure(
          [api, ctx, ps, policy = policy_, done = std::move(done)] {
            char err[kErrLen] = {0};
            const int rc = policy.Call(api, ctx, ps, err);
            if (rc != 0) ctx->SetStatus(ToStatus(rc, err));
            done();
          });
    } else {
      std::string local_error;
      if constexpr (HasLocalError<P>::value) {
        local_error = policy_.LocalError(api, ctx, attrs_, t);
      }
      std::vector<uint64_t> handles(t.size());
      char err[kErrLen] = {0};
      const int rc = policy_.Submit(api, ctx, attrs_, t, handles.data(), err);
      if (rc != 0) {
        // libkolo refused it on every rank (its checks, e.g. a scalar to gather).
        for (const std::string& n : t.names) Refusals().Add(attrs_.process_set, n);
        ctx->SetStatus(local_error.empty() ? ToStatus(rc, err)
                                           : absl::InvalidArgumentError(local_error));
        return done();
      }
      FinishWhenDone(api, ctx, std::move(handles), std::move(local_error),
                     std::make_shared<Tensors>(std::move(t)), std::move(done));
    }
  }

 private:
  // A policy with attributes of its own reads them from `c`.
  static P MakePolicy(OpKernelConstruction* c) {
    if constexpr (std::is_constructible_v<P, OpKernelConstruction*>) {
      return P(c);
    } else {
      return P();
    }
  }

  // Completes the op: here when its handles complete within wait_inline_us
  // or are under way by then (set for eager calls, whose caller waits for
  // the op anyway: no thread hand-off), else on a thread of its own, so no
  // TensorFlow pool thread blocks on other ranks.
  // An op with a local error fails with it once its handles complete.
  void FinishWhenDone(const KoloPyApi* api, OpKernelContext* ctx, std::vector<uint64_t> handles,
                      std::string local_error, std::shared_ptr<Tensors> t,
                      DoneCallback done) const {
    auto finish = [this, api, ctx, handles, local_error = std::move(local_error), t,
                   done = std::move(done)] {
      if (!local_error.empty()) {
        FailWhenComplete(api, ctx, handles, P::kFinish, local_error);
      } else if constexpr (P::kInputs == Inputs::kFirst) {
        absl::Status s = WaitOne(api, ctx, handles[0], 0, P::kFinish);
        if (s.code() == absl::StatusCode::kAlreadyExists) s = Resubmit(api, ctx, *t, s);
        if (!s.ok()) ctx->SetStatus(s);
      } else {
        Complete(api, ctx, handles, P::kFinish);
      }
      done();
    };
    if (attrs_.wait_inline_us > 0 && ReadyWithin(api, handles, attrs_.wait_inline_us)) {
      return finish();
    }
    tensorflow::Env::Default()->SchedClosure(std::move(finish));
  }

  // A one-tensor op that kolod took for a duplicate of a name this
  // process refused lately: submitted again, a little later each time,
  // until kolod takes it (the refused round ended) or gives another answer.
  absl::Status Resubmit(const KoloPyApi* api, OpKernelContext* ctx, const Tensors& t,
                        absl::Status s) const {
    int64_t pause_us = 200;
    while (s.code() == absl::StatusCode::kAlreadyExists &&
           Refusals().Retry(attrs_.process_set, attrs_.name)) {
      tensorflow::Env::Default()->SleepForMicroseconds(pause_us);
      pause_us = std::min<int64_t>(pause_us * 2, 20000);
      uint64_t h = 0;
      char err[kErrLen] = {0};
      const int rc = policy_.Submit(api, ctx, attrs_, t, &h, err);
      s = rc != 0 ? ToStatus(rc, err) : WaitOne(api, ctx, h, 0, P::kFinish);
    }
    if (s.code() != absl::StatusCode::kAlreadyExists) {
      Refusals().Forget(attrs_.process_set, attrs_.name);
    }
    return s;
  }

  const OpAttrs attrs_;
  const P policy_;
};

// A policy's collective, the inputs it moves and how it finishes.
template <int Kind, Inputs In, Finish F>
struct Collective {
  static constexpr int kKind = Kind;
  static constexpr Inputs kInputs = In;
  static constexpr Finish kFinish = F;
};

// Outputs allocated when the result arrives (or none).
struct NoOutputs {
  absl::Status Outputs(OpKernelContext*, Tensors*) const { return absl::OkStatus(); }
};

// Output i shaped like input i, allocated before the op submits.
struct SameShapeOutputs {
  absl::Status Outputs(OpKernelContext* ctx, Tensors* t) const {
    for (int i = 0; i < t->size(); ++i) {
      Tensor* out = nullptr;
      TF_RETURN_IF_ERROR(ctx->allocate_output(i, ctx->input(i).shape(), &out));
      t->outs.push_back(MutableDataOf(out));
    }
    return absl::OkStatus();
  }
};

struct AllreducePolicy : Collective<kAllreduce, Inputs::kFirst, Finish::kWait>, SameShapeOutputs {
  explicit AllreducePolicy(OpKernelConstruction* c) : r(c, true) {}
  int Submit(const KoloPyApi* api, OpKernelContext*, const OpAttrs& a, const Tensors& t,
             uint64_t* h, char* err) const {
    return api->allreduce_async(t.data[0], t.outs[0], t.dtypes[0], t.shapes[0], t.ndims[0],
                                a.name.c_str(), r.op, r.prescale, r.postscale, r.compression,
                                a.process_set, h, err, kErrLen);
  }
  ReduceAttrs r;
};

struct GroupedAllreducePolicy : Collective<kAllreduce, Inputs::kGroup, Finish::kWait>,
                                SameShapeOutputs {
  explicit GroupedAllreducePolicy(OpKernelConstruction* c) : r(c, true) {}
  int Submit(const KoloPyApi* api, OpKernelContext*, const OpAttrs& a, const Tensors& t,
             uint64_t* h, char* err) const {
    return api->grouped_allreduce_async(t.size(), t.data.data(), t.outs.data(), t.dtypes.data(),
                                        t.shapes.data(), t.ndims.data(), t.cnames.data(), r.op,
                                        r.prescale, r.postscale, r.compression, a.process_set, h,
                                        err, kErrLen);
  }
  ReduceAttrs r;
};

// The root's tensor is sent from (and everyone's received into) the output.
struct BroadcastPolicy : Collective<kBroadcast, Inputs::kFirst, Finish::kWait> {
  explicit BroadcastPolicy(OpKernelConstruction* c) {
    OP_REQUIRES_OK(c, c->GetAttr("root_rank", &root));
  }
  absl::Status Outputs(OpKernelContext* ctx, Tensors* t) const {
    TF_RETURN_IF_ERROR(SameShapeOutputs().Outputs(ctx, t));
    const Tensor& in = ctx->input(0);
    if (in.NumElements() > 0) std::memcpy(t->outs[0], DataOf(in), in.TotalBytes());
    return absl::OkStatus();
  }
  int Submit(const KoloPyApi* api, OpKernelContext*, const OpAttrs& a, const Tensors& t,
             uint64_t* h, char* err) const {
    return api->broadcast_async(t.outs[0], t.dtypes[0], t.shapes[0], t.ndims[0], a.name.c_str(),
                                root, a.process_set, h, err, kErrLen);
  }
  int root = 0;
};

// A scalar is refused by libkolo, which tells the other ranks.
struct AllgatherPolicy : Collective<kAllgather, Inputs::kFirst, Finish::kWaitOutput>, NoOutputs {
  int Submit(const KoloPyApi* api, OpKernelContext*, const OpAttrs& a, const Tensors& t,
             uint64_t* h, char* err) const {
    return api->allgather_async(t.data[0], t.dtypes[0], t.shapes[0], t.ndims[0], a.name.c_str(),
                                a.process_set, h, err, kErrLen);
  }
};

struct ReducescatterPolicy : Collective<kReducescatter, Inputs::kFirst, Finish::kWaitOutput>,
                             NoOutputs {
  explicit ReducescatterPolicy(OpKernelConstruction* c) : r(c, false) {}
  int Submit(const KoloPyApi* api, OpKernelContext*, const OpAttrs& a, const Tensors& t,
             uint64_t* h, char* err) const {
    return api->reducescatter_async(t.data[0], t.dtypes[0], t.shapes[0], t.ndims[0], a.name.c_str(),
                                    r.op, r.prescale, r.postscale, a.process_set, h, err, kErrLen);
  }
  ReduceAttrs r;
};

// Input 1 holds the rows of input 0 that go to each rank. Splits that
// cannot fit the tensor or the set (set_size ranks; 0: the job's size for
// the global set, else unknown here) are found here, and the op fails with
// InvalidArgument saying why, as Horovod's does. It is submitted all the
// same, and fails only once kolod has refused it (its own check of splits
// is the same rule): the round of that name then ends on every rank, so a
// peer whose own call was fine fails instead of waiting, and a retry of the
// name (every unnamed eager alltoall shares one) starts a new round.
struct AlltoallPolicy : Collective<kAlltoall, Inputs::kFirst, Finish::kWaitAlltoall>, NoOutputs {
  explicit AlltoallPolicy(OpKernelConstruction* c) {
    OP_REQUIRES_OK(c, c->GetAttr("set_size", &set_size));
  }
  int Submit(const KoloPyApi* api, OpKernelContext* ctx, const OpAttrs& a, const Tensors& t,
             uint64_t* h, char* err) const {
    const std::vector<int64_t> sp = Splits(ctx);
    return api->alltoall_async(t.data[0], t.dtypes[0], t.shapes[0], t.ndims[0], sp.data(),
                               static_cast<int>(sp.size()), a.name.c_str(), a.process_set, h, err,
                               kErrLen);
  }
  std::string LocalError(const KoloPyApi* api, OpKernelContext* ctx, const OpAttrs& a,
                         const Tensors& t) const {
    return CheckSplits(api, a, t.ndims[0] > 0 ? t.shapes[0][0] : 0, Splits(ctx));
  }
  static std::vector<int64_t> Splits(OpKernelContext* ctx) {
    auto flat = ctx->input(1).flat<int64_t>();
    return std::vector<int64_t>(flat.data(), flat.data() + flat.size());
  }
  // Why `splits` of a tensor of `rows` rows cannot be sent, or "".
  std::string CheckSplits(const KoloPyApi* api, const OpAttrs& a, int64_t rows,
                          const std::vector<int64_t>& splits) const {
    const int64_t ranks = set_size > 0 ? set_size : a.process_set == 0 ? api->size() : 0;
    const std::string what = "alltoall \"" + a.name + "\": ";
    if (splits.empty()) {
      if (ranks <= 0 || rows % ranks == 0) return "";
      return what + "the first dimension " + std::to_string(rows) +
             " does not divide evenly among " + std::to_string(ranks) + " ranks; pass splits";
    }
    if (ranks > 0 && static_cast<int64_t>(splits.size()) != ranks) {
      return what + std::to_string(splits.size()) + " splits for a process set of " +
             std::to_string(ranks) + " ranks";
    }
    int64_t sum = 0;
    for (int64_t v : splits) {
      if (v < 0) return what + "negative split " + std::to_string(v);
      sum += v;
    }
    if (sum > rows) {
      return what + "the splits sum to " + std::to_string(sum) +
             ", more than the first dimension " + std::to_string(rows);
    }
    if (sum < rows) {
      return what + "the splits sum to " + std::to_string(sum) +
             ", less than the first dimension " + std::to_string(rows);
    }
    return "";
  }
  int64_t set_size = 0;
};

// Several tensors gathered as one negotiated, fused group: member i fills
// output i.
struct GroupedAllgatherPolicy : Collective<kAllgather, Inputs::kGroup, Finish::kWaitOutput>,
                                NoOutputs {
  int Submit(const KoloPyApi* api, OpKernelContext*, const OpAttrs& a, const Tensors& t,
             uint64_t* h, char* err) const {
    return api->grouped_allgather_async(t.size(), t.data.data(), t.dtypes.data(), t.shapes.data(),
                                        t.ndims.data(), t.cnames.data(), a.process_set, h, err,
                                        kErrLen);
  }
};

// Several tensors reduced and scattered as one group: member i fills
// output i.
struct GroupedReducescatterPolicy : Collective<kReducescatter, Inputs::kGroup, Finish::kWaitOutput>,
                                    NoOutputs {
  explicit GroupedReducescatterPolicy(OpKernelConstruction* c) : r(c, false) {}
  int Submit(const KoloPyApi* api, OpKernelContext*, const OpAttrs& a, const Tensors& t,
             uint64_t* h, char* err) const {
    return api->grouped_reducescatter_async(
        t.size(), t.data.data(), t.dtypes.data(), t.shapes.data(), t.ndims.data(), t.cnames.data(),
        r.op, r.prescale, r.postscale, a.process_set, h, err, kErrLen);
  }
  ReduceAttrs r;
};

struct BarrierPolicy : Collective<kNoCollective, Inputs::kNone, Finish::kBlocking>, NoOutputs {
  int Call(const KoloPyApi* api, OpKernelContext*, int process_set, char* err) const {
    return api->barrier(process_set, err, kErrLen);
  }
};

// Output 0: the last rank to join (-1 if the call failed).
struct JoinPolicy : Collective<kNoCollective, Inputs::kNone, Finish::kBlocking> {
  absl::Status Outputs(OpKernelContext* ctx, Tensors*) const {
    Tensor* out = nullptr;
    return ctx->allocate_output(0, TensorShape({}), &out);
  }
  int Call(const KoloPyApi* api, OpKernelContext* ctx, int, char* err) const {
    int last = -1;
    const int rc = api->join(&last, err, kErrLen);
    ctx->mutable_output(0)->scalar<int32_t>()() = last;
    return rc;
  }
};

// Output i is input i's shape.
absl::Status SameShapes(InferenceContext* c) {
  for (int i = 0; i < c->num_inputs(); ++i) c->set_output(i, c->input(i));
  return absl::OkStatus();
}

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

// Outputs like KoloAllgather's, one per input.
absl::Status FirstDimsUnknown(InferenceContext* c) {
  for (int i = 0; i < c->num_inputs(); ++i) TF_RETURN_IF_ERROR(FirstDimUnknownAt(c, i));
  return absl::OkStatus();
}

// Every dtype reaches the kernel, which refuses those Kolo cannot move on
// every rank (CheckDTypes): a type constraint here would fail the op on one
// rank only, while the others wait for it. A group's T is a list of them.
#define KOLO_TYPES "type"
#define KOLO_GROUP_TYPES "list(type)"

// Registers collective op `name` (every Kolo op but barrier and join) with
// its attributes in order: its tensors' dtype T (`types`), its collective
// name (tensor_name, '' for the node's name), its own attributes (`...`),
// its process set and how long an eager call waits inline (wait_inline_us:
// kolo/tensorflow/_ops.py); its inputs, outputs and shape function follow
// as after REGISTER_OP. Every Kolo op is stateful.
#define REGISTER_KOLO_COLLECTIVE(name, types, ...)                               \
  REGISTER_OP(name)                                                              \
      .Attr("T: " types)                                                         \
      .Attr("tensor_name: string = ''") __VA_ARGS__.Attr("process_set: int = 0") \
      .Attr("wait_inline_us: int = 0")                                           \
      .SetIsStateful()
// A reducing collective's attributes.
#define KOLO_REDUCE_ATTRS                   \
  .Attr("reduce_op: int = 1")               \
      .Attr("prescale_factor: float = 1.0") \
      .Attr("postscale_factor: float = 1.0")

REGISTER_KOLO_COLLECTIVE("KoloAllreduce", KOLO_TYPES,
                         KOLO_REDUCE_ATTRS.Attr("compression: int = 0"))
    .Input("tensor: T")
    .Output("output: T")
    .SetShapeFn(SameShapes);

REGISTER_KOLO_COLLECTIVE("KoloGroupedAllreduce", KOLO_GROUP_TYPES,
                         KOLO_REDUCE_ATTRS.Attr("compression: int = 0"))
    .Input("tensors: T")
    .Output("outputs: T")
    .SetShapeFn(SameShapes);

REGISTER_KOLO_COLLECTIVE("KoloBroadcast", KOLO_TYPES, .Attr("root_rank: int"))
    .Input("tensor: T")
    .Output("output: T")
    .SetShapeFn(SameShapes);

REGISTER_KOLO_COLLECTIVE("KoloAllgather", KOLO_TYPES)
    .Input("tensor: T")
    .Output("output: T")
    .SetShapeFn(FirstDimsUnknown);

REGISTER_KOLO_COLLECTIVE("KoloGroupedAllgather", KOLO_GROUP_TYPES)
    .Input("tensors: T")
    .Output("outputs: T")
    .SetShapeFn(FirstDimsUnknown);

REGISTER_KOLO_COLLECTIVE("KoloGroupedReducescatter", KOLO_GROUP_TYPES, KOLO_REDUCE_ATTRS)
    .Input("tensors: T")
    .Output("outputs: T")
    .SetShapeFn(FirstDimsUnknown);

REGISTER_KOLO_COLLECTIVE("KoloReducescatter", KOLO_TYPES, KOLO_REDUCE_ATTRS)
    .Input("tensor: T")
    .Output("output: T")
    .SetShapeFn(FirstDimsUnknown);

REGISTER_KOLO_COLLECTIVE("KoloAlltoall", KOLO_TYPES)
    .Attr("set_size: int = 0")
    .Input("tensor: T")
    .Input("splits: int64")
    .Output("output: T")
    .Output("received_splits: int64")
    .SetShapeFn([](InferenceContext* c) {
      TF_RETURN_IF_ERROR(FirstDimUnknownAt(c, 0));
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

// Every op is a KoloOp of its collective's policy.
#define KOLO_KERNEL(name, policy) \
  REGISTER_KERNEL_BUILDER(Name(name).Device(tensorflow::DEVICE_CPU), KoloOp<policy>)

KOLO_KERNEL("KoloAllreduce", AllreducePolicy);
KOLO_KERNEL("KoloGroupedAllreduce", GroupedAllreducePolicy);
KOLO_KERNEL("KoloBroadcast", BroadcastPolicy);
KOLO_KERNEL("KoloAllgather", AllgatherPolicy);
KOLO_KERNEL("KoloReducescatter", ReducescatterPolicy);
KOLO_KERNEL("KoloAlltoall", AlltoallPolicy);
KOLO_KERNEL("KoloGroupedAllgather", GroupedAllgatherPolicy);
KOLO_KERNEL("KoloGroupedReducescatter", GroupedReducescatterPolicy);
KOLO_KERNEL("KoloBarrier", BarrierPolicy);
KOLO_KERNEL("KoloJoin", JoinPolicy);

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
