#include "tests/soak/soak_collectives.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "tests/integration/tensor_values.h"

namespace kolo::soak {
namespace {

using testing::Clamp;
using testing::Close;
using testing::Expected;
using testing::InputValue;
using testing::Load;
using testing::Store;

// Element counts of the size classes and how often each is drawn (of 100):
// most collectives are small, as a training step's are; one in a hundred
// moves up to 4 MiB (float64).
constexpr int64_t kClassElements[] = {1, 8, 100, 1000, 10000, 100000, int64_t{1} << 19};
constexpr int kClassWeight[] = {30, 30, 20, 12, 5, 2, 1};
constexpr int kWeightTotal = 100;

uint64_t Mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Rows: allgather and alltoall send 0, 1 or 2 units of rows per rank (and
// per destination), varying with the salt; reducescatter splits one block.
int64_t UnitRows(const Spec& s) { return std::max<int64_t>(1, s.elements / s.cols / 2); }
int64_t GatherRows(const Spec& s, int rank) { return ((rank + s.salt) % 3) * UnitRows(s); }
int64_t SplitRows(const Spec& s, int from, int to) {
  return ((from + to + s.salt) % 3) * UnitRows(s);
}
int64_t ScatterRows(const Spec& s) { return std::max<int64_t>(1, s.elements / s.cols); }
int64_t ScatterShare(const Spec& s, int size, int rank) {
  const int64_t total = ScatterRows(s);
  return total / size + (rank < total % size ? 1 : 0);
}

// Values below 100 are exact in every dtype (bool holds whether they are
// not zero).
double BroadcastValue(const Spec& s, int rank, int64_t i) {
  return Clamp(s.dtype, (rank * 13 + i + s.salt) % 100);
}
double GatherValue(const Spec& s, int rank, int64_t i) {
  return Clamp(s.dtype, (rank * 10 + i + s.salt) % 100);
}
double AlltoallValue(const Spec& s, int from, int to, int64_t i) {
  return Clamp(s.dtype, (from * 31 + to * 7 + i + s.salt) % 100);
}

// Memory for `shape`: in the arena (zero copy) or the process's own.
absl::StatusOr<void*> Buffer(Client& c, Pending& p, const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  if (p.spec.zero_copy && n > 0) {
    KOLO_ASSIGN_OR_RETURN(p.shm, c.Allocate(p.spec.dtype, shape));
    return p.shm.data();
  }
  p.own.assign(n * DTypeSize(p.spec.dtype) + 1, 0);
  return p.own.data();
}

// Compares `n` elements at `data` with want(i); the first difference fails.
template <typename Want>
absl::Status CheckElements(const Spec& s, const void* data, int64_t n, int64_t first, Want want) {
  for (int64_t i = 0; i < n; ++i) {
    const double got = Load(s.dtype, data, i), w = want(i);
    if (!Close(s.dtype, got, w)) {
      return absl::DataLossError(absl::StrCat(KindName(s.kind), " \"", s.name, "\" (",
                                              DTypeName(s.dtype), " ", ReduceOpName(s.op), ", ",
                                              s.elements, " elements, salt ", s.salt, ") [",
                                              first + i, "]: got ", got, " want ", w));
    }
  }
  return absl::OkStatus();
}

absl::Status ShapeError(const Spec& s, const std::vector<int64_t>& got, int64_t rows) {
  return absl::DataLossError(absl::StrCat(KindName(s.kind), " \"", s.name, "\": shape [",
                                          absl::StrJoin(got, ","), "] want [", rows, ",", s.cols,
                                          "]"));
}

absl::StatusOr<Handle> SubmitAllreduce(Client& c, Pending& p) {
  const Spec& s = p.spec;
  KOLO_ASSIGN_OR_RETURN(void* d, Buffer(c, p, {s.elements}));
  for (int64_t i = 0; i < s.elements; ++i) {
    Store(s.dtype, d, i, Clamp(s.dtype, InputValue(s.op, c.rank(), i + s.salt)));
  }
  TensorView v{d, s.dtype, {s.elements}};
  return c.AllreduceAsync(v, v, s.name, {.op = s.op});
}

absl::StatusOr<Handle> SubmitBroadcast(Client& c, Pending& p) {
  const Spec& s = p.spec;
  KOLO_ASSIGN_OR_RETURN(void* d, Buffer(c, p, {s.elements}));
  for (int64_t i = 0; i < s.elements; ++i) Store(s.dtype, d, i, BroadcastValue(s, c.rank(), i));
  return c.BroadcastAsync(TensorView{d, s.dtype, {s.elements}}, s.name, s.root);
}

absl::StatusOr<Handle> SubmitAllgather(Client& c, Pending& p) {
  const Spec& s = p.spec;
  const int64_t rows = GatherRows(s, c.rank());
  KOLO_ASSIGN_OR_RETURN(void* d, Buffer(c, p, {rows, s.cols}));
  for (int64_t i = 0; i < rows * s.cols; ++i) Store(s.dtype, d, i, GatherValue(s, c.rank(), i));
  return c.AllgatherAsync(ConstTensorView(d, s.dtype, {rows, s.cols}), s.name);
}

absl::StatusOr<Handle> SubmitReducescatter(Client& c, Pending& p) {
  const Spec& s = p.spec;
  const int64_t rows = ScatterRows(s);
  KOLO_ASSIGN_OR_RETURN(void* d, Buffer(c, p, {rows, s.cols}));
  for (int64_t i = 0; i < rows * s.cols; ++i) {
    Store(s.dtype, d, i, Clamp(s.dtype, InputValue(s.op, c.rank(), i + s.salt)));
  }
  return c.ReducescatterAsync(ConstTensorView(d, s.dtype, {rows, s.cols}), s.name, {.op = s.op});
}

absl::StatusOr<Handle> SubmitAlltoall(Client& c, Pending& p) {
  const Spec& s = p.spec;
  std::vector<int64_t> splits(c.size());
  int64_t rows = 0;
  for (int j = 0; j < c.size(); ++j) rows += splits[j] = SplitRows(s, c.rank(), j);
  KOLO_ASSIGN_OR_RETURN(void* d, Buffer(c, p, {rows, s.cols}));
  int64_t at = 0;
  for (int j = 0; j < c.size(); ++j) {
    for (int64_t i = 0; i < splits[j] * s.cols; ++i, ++at) {
      Store(s.dtype, d, at, AlltoallValue(s, c.rank(), j, i));
    }
  }
  return c.AlltoallAsync(ConstTensorView(d, s.dtype, {rows, s.cols}), splits, s.name);
}

absl::Status CompleteAllgather(Client& c, const Spec& s, Handle h) {
  KOLO_ASSIGN_OR_RETURN(HostBuffer out, c.WaitForOutput(h));
  int64_t total = 0;
  for (int r = 0; r < c.size(); ++r) total += GatherRows(s, r);
  if (out.shape() != std::vector<int64_t>{total, s.cols}) return ShapeError(s, out.shape(), total);
  int64_t at = 0;
  for (int r = 0; r < c.size(); ++r) {
    const int64_t n = GatherRows(s, r) * s.cols;
    const auto* base = static_cast<const uint8_t*>(out.data()) + at * DTypeSize(s.dtype);
    KOLO_RETURN_IF_ERROR(
        CheckElements(s, base, n, at, [&](int64_t i) { return GatherValue(s, r, i); }));
    at += n;
  }
  return absl::OkStatus();
}

absl::Status CompleteReducescatter(Client& c, const Spec& s, Handle h) {
  KOLO_ASSIGN_OR_RETURN(HostBuffer out, c.WaitForOutput(h));
  const int64_t mine = ScatterShare(s, c.size(), c.rank());
  if (out.shape() != std::vector<int64_t>{mine, s.cols}) return ShapeError(s, out.shape(), mine);
  int64_t first = 0;
  for (int r = 0; r < c.rank(); ++r) first += ScatterShare(s, c.size(), r) * s.cols;
  return CheckElements(s, out.data(), mine * s.cols, first, [&](int64_t i) {
    return Expected(s.dtype, s.op, c.size(), first + i + s.salt);
  });
}

absl::Status CompleteAlltoall(Client& c, const Spec& s, Handle h) {
  KOLO_ASSIGN_OR_RETURN(AlltoallResult got, c.WaitForAlltoall(h));
  int64_t at = 0;
  for (int from = 0; from < c.size(); ++from) {
    const int64_t rows = SplitRows(s, from, c.rank());
    if (from >= static_cast<int>(got.received_splits.size()) || got.received_splits[from] != rows) {
      return absl::DataLossError(
          absl::StrCat("alltoall \"", s.name, "\": rows from rank ", from, " differ from ", rows));
    }
    const auto* base = static_cast<const uint8_t*>(got.output.data()) + at * DTypeSize(s.dtype);
    KOLO_RETURN_IF_ERROR(CheckElements(s, base, rows * s.cols, at, [&](int64_t i) {
      return AlltoallValue(s, from, c.rank(), i);
    }));
    at += rows * s.cols;
  }
  return absl::OkStatus();
}

}  // namespace

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kAllreduce:
      return "allreduce";
    case Kind::kBroadcast:
      return "broadcast";
    case Kind::kAllgather:
      return "allgather";
    case Kind::kReducescatter:
      return "reducescatter";
    case Kind::kAlltoall:
      return "alltoall";
  }
  return "?";
}

Spec SpecFor(uint64_t seed, uint64_t index, int slot, int size, int64_t max_elements) {
  uint64_t h = Mix(seed ^ Mix(index));
  auto next = [&h](uint64_t n) {
    h = Mix(h);
    return static_cast<int64_t>(h % n);
  };
  Spec s;
  s.kind = static_cast<Kind>(next(kNumKinds));
  s.dtype = static_cast<DType>(next(kNumDTypes));
  int w = static_cast<int>(next(kWeightTotal)), cls = 0;
  while (w >= kClassWeight[cls]) w -= kClassWeight[cls++];
  s.elements = std::min(kClassElements[cls], max_elements);
  s.cols = 1 + next(3);
  s.root = static_cast<int>(next(size));
  s.zero_copy = next(2) == 0;
  s.salt = next(101);
  if (s.kind == Kind::kAllreduce) s.op = static_cast<ReduceOp>(next(kNumReduceOps));
  // bool has no average: its or instead. Adasum is not elementwise (the
  // values checked here are): its tests are its own.
  if (!ReducesWith(s.dtype, s.op) || s.op == ReduceOp::kAdasum) s.op = ReduceOp::kMax;
  // Reducescatter averages only where the quotient needs no integer rounding rule.
  if (s.kind == Kind::kReducescatter && IsFloatingPoint(s.dtype) && next(2) == 0) {
    s.op = ReduceOp::kAverage;
  }
  if (next(16) == 0) {
    s.name = absl::StrCat("soak/once/", index);
  } else {
    s.name = absl::StrCat("soak/", KindName(s.kind), "/", DTypeName(s.dtype), "/",
                          ReduceOpName(s.op), "/c", cls, "x", s.cols, "/r", s.root, "/", slot);
  }
  return s;
}

absl::StatusOr<Pending> Submit(Client& c, Spec spec) {
  Pending p;
  p.spec = std::move(spec);
  absl::StatusOr<Handle> h;
  switch (p.spec.kind) {
    case Kind::kAllreduce:
      h = SubmitAllreduce(c, p);
      break;
    case Kind::kBroadcast:
      h = SubmitBroadcast(c, p);
      break;
    case Kind::kAllgather:
      h = SubmitAllgather(c, p);
      break;
    case Kind::kReducescatter:
      h = SubmitReducescatter(c, p);
      break;
    case Kind::kAlltoall:
      h = SubmitAlltoall(c, p);
      break;
  }
  if (!h.ok()) return h.status();
  p.handle = *h;
  return p;
}

absl::Status Complete(Client& c, Pending p) {
  const Spec& s = p.spec;
  switch (s.kind) {
    case Kind::kAllreduce:
    case Kind::kBroadcast: {
      KOLO_RETURN_IF_ERROR(c.Wait(p.handle));
      const void* d = s.zero_copy && s.elements > 0 ? p.shm.data() : p.own.data();
      if (s.kind == Kind::kBroadcast) {
        return CheckElements(s, d, s.elements, 0,
                             [&](int64_t i) { return BroadcastValue(s, s.root, i); });
      }
      return CheckElements(s, d, s.elements, 0, [&](int64_t i) {
        return Expected(s.dtype, s.op, c.size(), i + s.salt);
      });
    }
    case Kind::kAllgather:
      return CompleteAllgather(c, s, p.handle);
    case Kind::kReducescatter:
      return CompleteReducescatter(c, s, p.handle);
    case Kind::kAlltoall:
      return CompleteAlltoall(c, s, p.handle);
  }
  return absl::InternalError("unknown kind");
}

}  // namespace kolo::soak
