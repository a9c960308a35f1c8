// test_rank: one rank of an integration scenario. Started by the tests in
// this folder (or kolorun) with the KOLO_* environment; checks every result
// it gets and exits 0 only if all were right.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kernels/cpu/half.h"
#include "kolo/kolo.h"

namespace {

using kolo::DType;
using kolo::ReduceOp;

int failures = 0;

#define CHECK_OR_COUNT(cond, ...)                                  \
  do {                                                             \
    if (!(cond)) {                                                 \
      ++failures;                                                  \
      std::fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);    \
      std::fprintf(stderr, __VA_ARGS__);                           \
      std::fprintf(stderr, "\n");                                  \
    }                                                              \
  } while (0)

// Element i of rank r's input: small integers, so sums and products are
// exact in every dtype.
double InputValue(ReduceOp op, int rank, int64_t i) {
  if (op == ReduceOp::kProduct) return ((rank + i) % 2) + 1;  // 1 or 2
  return static_cast<double>((rank * 7 + i * 3) % 11) - ((i % 4 == 0) ? 5 : 0);
}

bool IsUnsigned(DType t) { return t == DType::kUint8; }

double Clamp(DType t, double v) {
  if (IsUnsigned(t)) return std::fabs(v);
  return v;
}

void Store(DType t, void* base, int64_t i, double v) {
  switch (t) {
    case DType::kUint8: static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(v); break;
    case DType::kInt8: static_cast<int8_t*>(base)[i] = static_cast<int8_t>(v); break;
    case DType::kInt32: static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v); break;
    case DType::kInt64: static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v); break;
    case DType::kFloat16: static_cast<uint16_t*>(base)[i] = kolo::kernels::FloatToHalf(static_cast<float>(v)); break;
    case DType::kBFloat16: static_cast<uint16_t*>(base)[i] = kolo::kernels::FloatToBFloat16(static_cast<float>(v)); break;
    case DType::kFloat32: static_cast<float*>(base)[i] = static_cast<float>(v); break;
    case DType::kFloat64: static_cast<double*>(base)[i] = v; break;
  }
}

double Load(DType t, const void* base, int64_t i) {
  switch (t) {
    case DType::kUint8: return static_cast<const uint8_t*>(base)[i];
    case DType::kInt8: return static_cast<const int8_t*>(base)[i];
    case DType::kInt32: return static_cast<const int32_t*>(base)[i];
    case DType::kInt64: return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case DType::kFloat16: return kolo::kernels::HalfToFloat(static_cast<const uint16_t*>(base)[i]);
    case DType::kBFloat16: return kolo::kernels::BFloat16ToFloat(static_cast<const uint16_t*>(base)[i]);
    case DType::kFloat32: return static_cast<const float*>(base)[i];
    case DType::kFloat64: return static_cast<const double*>(base)[i];
  }
  return 0;
}

double Expected(DType t, ReduceOp op, int size, int64_t i) {
  double acc = Clamp(t, InputValue(op, 0, i));
  for (int r = 1; r < size; ++r) {
    double v = Clamp(t, InputValue(op, r, i));
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage: acc += v; break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
      case ReduceOp::kProduct: acc *= v; break;
    }
  }
  if (op == ReduceOp::kAverage) {
    acc /= size;
    if (!kolo::IsFloatingPoint(t)) acc = std::trunc(acc);
  }
  return acc;
}

bool Close(DType t, double got, double want) {
  double tol = 0;
  if (t == DType::kFloat16) tol = 1e-3 * std::max(1.0, std::fabs(want));
  if (t == DType::kBFloat16) tol = 8e-3 * std::max(1.0, std::fabs(want));
  if (t == DType::kFloat32) tol = 1e-6 * std::max(1.0, std::fabs(want));
  if (t == DType::kFloat64) tol = 1e-12 * std::max(1.0, std::fabs(want));
  return std::fabs(got - want) <= tol;
}

// One allreduce of `count` elements; zero copy or through the caller's memory.
void CheckAllreduce(kolo::Client& c, DType t, ReduceOp op, int64_t count,
                    bool zero_copy, const std::string& name) {
  const int rank = c.rank(), size = c.size();
  std::vector<int64_t> shape = {count};
  std::vector<uint8_t> own;
  kolo::HostBuffer shm;
  void* data;
  if (zero_copy) {
    auto b = c.Allocate(t, shape);
    CHECK_OR_COUNT(b.ok(), "allocate: %s", b.status().ToString().c_str());
    if (!b.ok()) return;
    shm = std::move(*b);
    data = shm.data();
  } else {
    own.resize(count * kolo::DTypeSize(t) + 1);
    data = own.data();
  }
  for (int64_t i = 0; i < count; ++i) Store(t, data, i, Clamp(t, InputValue(op, rank, i)));
  kolo::TensorView v{data, t, shape};
  absl::Status s = c.Allreduce(v, v, name, op);
  CHECK_OR_COUNT(s.ok(), "%s: %s", name.c_str(), s.ToString().c_str());
  if (!s.ok()) return;
  int bad = 0;
  for (int64_t i = 0; i < count && bad < 3; ++i) {
    double got = Load(t, data, i), want = Expected(t, op, size, i);
    if (!Close(t, got, want)) {
      ++bad;
      CHECK_OR_COUNT(false, "%s [%ld]: got %g want %g", name.c_str(),
                     static_cast<long>(i), got, want);
    }
  }
}

void ScenarioMatrix(kolo::Client& c) {
  const DType dtypes[] = {DType::kUint8, DType::kInt8, DType::kInt32, DType::kInt64,
                          DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64};
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin,
                          ReduceOp::kMax, ReduceOp::kProduct};
  for (DType t : dtypes) {
    for (ReduceOp op : ops) {
      for (int64_t count : {0, 1, 7, 1000, 65537}) {
        for (bool zc : {true, false}) {
          CheckAllreduce(c, t, op, count, zc,
                         absl::StrCat("m/", kolo::DTypeName(t), "/",
                                      kolo::ReduceOpName(op), "/", count, zc ? "/z" : "/c"));
        }
      }
    }
  }
  // Scale factors: result = postscale * sum(prescale * x).
  std::vector<float> x(100);
  for (int i = 0; i < 100; ++i) x[i] = static_cast<float>(c.rank() + i);
  std::vector<float> y(100);
  absl::Status s = c.Allreduce(kolo::ConstTensorView(x.data(), DType::kFloat32, {10, 10}),
                               kolo::TensorView{y.data(), DType::kFloat32, {10, 10}},
                               "scaled", {.op = ReduceOp::kSum, .prescale = 0.5, .postscale = 4.0});
  CHECK_OR_COUNT(s.ok(), "scaled: %s", s.ToString().c_str());
  for (int i = 0; i < 100 && s.ok(); ++i) {
    double sum = 0;
    for (int r = 0; r < c.size(); ++r) sum += r + i;
    CHECK_OR_COUNT(std::fabs(y[i] - 2.0 * sum) < 1e-3, "scaled[%d]=%g want %g", i, y[i], 2.0 * sum);
  }
  // Scalars (rank 0 shapes).
  double one = c.rank() + 1.0, out = 0;
  s = c.Allreduce(kolo::ConstTensorView(&one, DType::kFloat64, {}),
                  kolo::TensorView{&out, DType::kFloat64, {}}, "scalar", ReduceOp::kSum);
  CHECK_OR_COUNT(s.ok() && out == c.size() * (c.size() + 1) / 2.0, "scalar %g", out);
}

void ScenarioSizes(kolo::Client& c) {
  for (int64_t bytes = 0; bytes <= (int64_t{64} << 20); bytes = bytes == 0 ? 4 : bytes * 8) {
    CheckAllreduce(c, DType::kFloat32, ReduceOp::kSum, bytes / 4, true,
                   absl::StrCat("size/", bytes));
  }
  CheckAllreduce(c, DType::kFloat32, ReduceOp::kSum, (int64_t{64} << 20) / 4, true, "size/64M");
  CheckAllreduce(c, DType::kFloat32, ReduceOp::kSum, (int64_t{64} << 20) / 4, false, "size/64M/copy");
}

void ScenarioInflight(kolo::Client& c) {
  constexpr int kTensors = 1000;
  std::vector<kolo::HostBuffer> bufs;
  for (int k = 0; k < kTensors; ++k) {
    auto b = c.Allocate(DType::kFloat32, {1 + k % 37});
    CHECK_OR_COUNT(b.ok(), "alloc");
    if (!b.ok()) return;
    for (int i = 0; i < 1 + k % 37; ++i) b->data_as<float>()[i] = c.rank() * 1000 + k + i;
    bufs.push_back(*std::move(b));
  }
  std::vector<int> order(kTensors);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937 rng(1234 + c.rank());
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<kolo::Handle> handles(kTensors);
  for (int k : order) {
    auto h = c.AllreduceAsync(bufs[k].view(), bufs[k].view(), absl::StrCat("inflight/", k));
    CHECK_OR_COUNT(h.ok(), "submit %d: %s", k, h.status().ToString().c_str());
    if (h.ok()) handles[k] = *h;
  }
  for (int k = 0; k < kTensors; ++k) {
    absl::Status s = c.Wait(handles[k]);
    CHECK_OR_COUNT(s.ok(), "wait %d: %s", k, s.ToString().c_str());
    for (int i = 0; i < 1 + k % 37 && s.ok(); ++i) {
      double want = 0;
      for (int r = 0; r < c.size(); ++r) want += r * 1000 + k + i;
      CHECK_OR_COUNT(bufs[k].data_as<float>()[i] == want, "inflight %d[%d]", k, i);
    }
  }
}

void ScenarioBroadcast(kolo::Client& c) {
  for (int root = 0; root < c.size(); ++root) {
    for (DType t : {DType::kInt8, DType::kFloat16, DType::kFloat32, DType::kInt64}) {
      for (bool zc : {true, false}) {
        const int64_t n = 3001;
        std::vector<uint8_t> own(n * kolo::DTypeSize(t));
        kolo::HostBuffer shm;
        void* data = own.data();
        if (zc) {
          shm = *c.Allocate(t, {n});
          data = shm.data();
        }
        for (int64_t i = 0; i < n; ++i) Store(t, data, i, (c.rank() * 13 + i) % 100);
        absl::Status s = c.Broadcast(kolo::TensorView{data, t, {n}},
                                     absl::StrCat("bcast/", root, "/", kolo::DTypeName(t), zc), root);
        CHECK_OR_COUNT(s.ok(), "bcast: %s", s.ToString().c_str());
        for (int64_t i = 0; i < n && s.ok(); ++i) {
          if (Load(t, data, i) != (root * 13 + i) % 100) {
            CHECK_OR_COUNT(false, "bcast root %d dtype %s [%ld]", root, kolo::DTypeName(t),
                           static_cast<long>(i));
            break;
          }
        }
      }
    }
  }
}

void ExpectMismatch(kolo::Client& c, absl::Status s, const char* what) {
  CHECK_OR_COUNT(s.code() == absl::StatusCode::kFailedPrecondition,
                 "%s: want FAILED_PRECONDITION, got %s", what, s.ToString().c_str());
  CHECK_OR_COUNT(absl::StrContains(s.message(), "rank "), "%s: message names no rank: %s",
                 what, s.ToString().c_str());
}

void ScenarioMismatch(kolo::Client& c) {
  const int r = c.rank();
  std::vector<float> buf(64, 1.0f);
  // Shape.
  ExpectMismatch(c, c.Allreduce(kolo::TensorView{buf.data(), DType::kFloat32, {4, r == 1 ? 5 : 4}},
                                kolo::TensorView{buf.data(), DType::kFloat32, {4, r == 1 ? 5 : 4}},
                                "grad/w1", ReduceOp::kSum), "shape");
  // Dtype.
  DType t = r == 1 ? DType::kInt32 : DType::kFloat32;
  ExpectMismatch(c, c.Allreduce(kolo::TensorView{buf.data(), t, {4}},
                                kolo::TensorView{buf.data(), t, {4}}, "dtype", ReduceOp::kSum),
                 "dtype");
  // Op.
  ExpectMismatch(c, c.Allreduce(kolo::TensorView{buf.data(), DType::kFloat32, {4}},
                                kolo::TensorView{buf.data(), DType::kFloat32, {4}}, "op",
                                r == 1 ? ReduceOp::kMax : ReduceOp::kSum), "op");
  // Scale factors.
  ExpectMismatch(c, c.Allreduce(kolo::TensorView{buf.data(), DType::kFloat32, {4}},
                                kolo::TensorView{buf.data(), DType::kFloat32, {4}}, "scale",
                                {.op = ReduceOp::kSum, .prescale = r == 1 ? 2.0 : 1.0}), "prescale");
  // Root.
  ExpectMismatch(c, c.Broadcast(kolo::TensorView{buf.data(), DType::kFloat32, {4}}, "root",
                                r == 1 ? 1 : 0), "root");
  // The job goes on after errors.
  CheckAllreduce(c, DType::kFloat32, ReduceOp::kSum, 10, true, "after-mismatch");
}

void ScenarioDuplicate(kolo::Client& c) {
  std::vector<float> a(8, 1.0f), b(8, 1.0f);
  kolo::TensorView va{a.data(), DType::kFloat32, {8}}, vb{b.data(), DType::kFloat32, {8}};
  if (c.rank() == 0) {
    auto h1 = c.AllreduceAsync(va, va, "dup");
    auto h2 = c.AllreduceAsync(vb, vb, "dup");
    CHECK_OR_COUNT(h1.ok() && h2.ok(), "submit");
    absl::Status s2 = c.Wait(*h2);
    CHECK_OR_COUNT(s2.code() == absl::StatusCode::kAlreadyExists, "dup: %s", s2.ToString().c_str());
    // Now let the other ranks submit theirs.
    std::vector<float> go(1, 1.0f);
    absl::Status g = c.Allreduce(kolo::TensorView{go.data(), DType::kFloat32, {1}},
                                 kolo::TensorView{go.data(), DType::kFloat32, {1}}, "go", ReduceOp::kSum);
    CHECK_OR_COUNT(g.ok(), "go");
    absl::Status s1 = c.Wait(*h1);
    CHECK_OR_COUNT(s1.ok() && a[0] == c.size(), "dup first: %s %g", s1.ToString().c_str(), a[0]);
  } else {
    std::vector<float> go(1, 1.0f);
    absl::Status g = c.Allreduce(kolo::TensorView{go.data(), DType::kFloat32, {1}},
                                 kolo::TensorView{go.data(), DType::kFloat32, {1}}, "go", ReduceOp::kSum);
    CHECK_OR_COUNT(g.ok(), "go");
    absl::Status s = c.Allreduce(va, va, "dup", ReduceOp::kSum);
    CHECK_OR_COUNT(s.ok() && a[0] == c.size(), "dup other: %s", s.ToString().c_str());
  }
}

// The last rank dies after a first collective; the others must see ABORTED
// naming it, promptly, for pending and later collectives.
void ScenarioRankDies(kolo::Client& c) {
  const int victim = c.size() - 1;
  CheckAllreduce(c, DType::kFloat32, ReduceOp::kSum, 4, true, "before-death");
  if (c.rank() == victim) {
    std::fflush(nullptr);
    _exit(3);  // no detach: a crash
  }
  std::vector<float> buf(4, 1.0f);
  kolo::TensorView v{buf.data(), DType::kFloat32, {4}};
  absl::Time start = absl::Now();
  absl::Status s = c.Allreduce(v, v, "after-death", ReduceOp::kSum);
  double took = absl::ToDoubleSeconds(absl::Now() - start);
  CHECK_OR_COUNT(s.code() == absl::StatusCode::kAborted, "pending: %s", s.ToString().c_str());
  CHECK_OR_COUNT(absl::StrContains(s.message(), absl::StrCat("rank ", victim)),
                 "message does not name rank %d: %s", victim, s.ToString().c_str());
  CHECK_OR_COUNT(took < 2.0, "took %.2f s", took);
  absl::Status later = c.Allreduce(v, v, "later", ReduceOp::kSum);
  CHECK_OR_COUNT(later.code() == absl::StatusCode::kAborted, "later: %s", later.ToString().c_str());
  std::printf("rank %d saw: %s (%.3f s)\n", c.rank(), s.ToString().c_str(), took);
}

// Waits on a collective that never completes; the test kills kolod.
void ScenarioDaemonDies(kolo::Client& c) {
  std::vector<float> buf(4, 1.0f);
  kolo::TensorView v{buf.data(), DType::kFloat32, {4}};
  auto h = c.AllreduceAsync(v, v, absl::StrCat("never/", c.rank()));
  CHECK_OR_COUNT(h.ok(), "submit");
  std::printf("waiting\n");
  std::fflush(stdout);
  absl::Status s = c.Wait(*h);
  absl::Time dead = absl::Now();
  CHECK_OR_COUNT(s.code() == absl::StatusCode::kUnavailable, "wait: %s", s.ToString().c_str());
  absl::Status again = c.Allreduce(v, v, "again", ReduceOp::kSum);
  CHECK_OR_COUNT(again.code() == absl::StatusCode::kUnavailable, "again: %s", again.ToString().c_str());
  CHECK_OR_COUNT(absl::Now() - dead < absl::Seconds(2), "second call was slow");
  std::printf("saw: %s\n", s.ToString().c_str());
}

// The last rank withholds "grad/w1"; everyone else submits it and waits. Each
// rank exits 0 once the job is ended from outside (an operator's abort or the
// stall timeout) and prints the status it saw.
void ScenarioWithhold(kolo::Client& c) {
  CheckAllreduce(c, DType::kFloat32, ReduceOp::kSum, 16, true, "warmup");
  std::vector<float> buf(16, 1.0f);
  kolo::TensorView v{buf.data(), DType::kFloat32, {16}};
  const bool withholder = c.rank() == c.size() - 1;
  auto h = c.AllreduceAsync(v, v, withholder ? "other/tensor" : "grad/w1");
  CHECK_OR_COUNT(h.ok(), "submit");
  std::printf("%s\n", withholder ? "withholding" : "submitted");
  std::fflush(stdout);
  absl::Status s = c.Wait(*h);
  CHECK_OR_COUNT(!s.ok(), "the withheld collective completed");
  std::printf("ended: %s\n", s.ToString().c_str());
}

}  // namespace

int main(int argc, char** argv) {
  std::string scenario = argc > 1 ? argv[1] : "matrix";
  auto options = kolo::ClientOptions::FromEnv();
  if (!options.ok()) {
    std::fprintf(stderr, "%s\n", options.status().ToString().c_str());
    return 2;
  }
  options->arena_bytes = uint64_t{320} << 20;
  auto client = kolo::Client::Connect(*options);
  if (!client.ok()) {
    std::fprintf(stderr, "connect: %s\n", client.status().ToString().c_str());
    return 2;
  }
  kolo::Client& c = **client;
  if (scenario == "matrix") ScenarioMatrix(c);
  else if (scenario == "sizes") ScenarioSizes(c);
  else if (scenario == "inflight") ScenarioInflight(c);
  else if (scenario == "broadcast") ScenarioBroadcast(c);
  else if (scenario == "mismatch") ScenarioMismatch(c);
  else if (scenario == "duplicate") ScenarioDuplicate(c);
  else if (scenario == "rank_dies") ScenarioRankDies(c);
  else if (scenario == "daemon_dies") ScenarioDaemonDies(c);
  else if (scenario == "withhold") ScenarioWithhold(c);
  else {
    std::fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
    return 2;
  }
  std::printf("rank %d/%d %s: %s (%d failures)\n", c.rank(), c.size(), scenario.c_str(),
              failures == 0 ? "ok" : "FAILED", failures);
  return failures == 0 ? 0 : 1;
}
