// test_rank's scenarios of collectives that complete: every dtype, op and
// size, in flight together, broadcast, tensors in parts.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kolo/kolo.h"
#include "tests/integration/tensor_values.h"
#include "tests/integration/test_rank.h"

namespace kolo::testing::rank {

// One allreduce of `count` elements; zero copy or through the caller's memory.
void CheckAllreduce(kolo::Client& c, DType t, ReduceOp op, int64_t count, bool zero_copy,
                    const std::string& name) {
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
      CHECK_OR_COUNT(false, "%s [%ld]: got %g want %g", name.c_str(), static_cast<long>(i), got,
                     want);
    } else if (!Canonical(t, data, i)) {
      ++bad;
      CHECK_OR_COUNT(false, "%s [%ld]: byte %d is not 0 or 1", name.c_str(), static_cast<long>(i),
                     static_cast<const uint8_t*>(data)[i]);
    }
  }
}

// An allreduce the dtype does not allow (bool: average, or a scale factor):
// refused with INVALID_ARGUMENT naming the dtype, and nothing written.
void CheckAllreduceRefused(kolo::Client& c, DType t, kolo::AllreduceOptions options,
                           const std::string& name) {
  std::vector<uint8_t> data(4 * kolo::DTypeSize(t));
  for (int64_t i = 0; i < 4; ++i) Store(t, data.data(), i, 1);
  const std::vector<uint8_t> before = data;
  kolo::TensorView v{data.data(), t, {4}};
  absl::Status s = c.Allreduce(v, v, name, options);
  CHECK_OR_COUNT(s.code() == absl::StatusCode::kInvalidArgument &&
                     absl::StrContains(s.message(), kolo::DTypeName(t)),
                 "%s: want INVALID_ARGUMENT naming %s, got %s", name.c_str(), kolo::DTypeName(t),
                 s.ToString().c_str());
  CHECK_OR_COUNT(data == before, "%s: a refused allreduce wrote its tensor", name.c_str());
}

// uint16 past int16's range: min and max compare unsigned, the sum wraps
// modulo 65536 and a postscale saturates at 65535 (after the sum).
void CheckUint16Range(kolo::Client& c) {
  const int size = c.size();
  // Element i of rank r's input.
  auto value = [](size_t i, int r) -> uint32_t {
    const uint32_t v[] = {static_cast<uint32_t>(65535 - r), static_cast<uint32_t>(40000 + r), 30000,
                          static_cast<uint32_t>(7 * (r + 1))};
    return v[i];
  };
  std::vector<uint16_t> in(4);
  std::vector<uint32_t> sums(4, 0);
  for (size_t i = 0; i < in.size(); ++i) {
    in[i] = static_cast<uint16_t>(value(i, c.rank()));
    for (int r = 0; r < size; ++r) sums[i] += value(i, r);
  }
  struct Case {
    const char* name;
    kolo::AllreduceOptions options;
    std::vector<uint32_t> want;
  };
  std::vector<Case> cases = {
      {"max", {.op = ReduceOp::kMax}, {65535, 40000u + size - 1, 30000, 7u * size}},
      {"min", {.op = ReduceOp::kMin}, {65535u - (size - 1), 40000, 30000, 7}},
      {"sum", {.op = ReduceOp::kSum}, {}},
      {"sum2", {.op = ReduceOp::kSum, .postscale = 2.0}, {}},
  };
  for (uint32_t s : sums) cases[2].want.push_back(s % 65536);
  for (uint32_t s : sums) cases[3].want.push_back(std::min<uint32_t>(65535, (s % 65536) * 2));
  for (const Case& k : cases) {
    std::vector<uint16_t> out(in.size());
    const std::string name = absl::StrCat("m/uint16/range/", k.name);
    absl::Status s =
        c.Allreduce(kolo::ConstTensorView(in.data(), DType::kUint16, {4}),
                    kolo::TensorView{out.data(), DType::kUint16, {4}}, name, k.options);
    CHECK_OR_COUNT(s.ok(), "%s: %s", name.c_str(), s.ToString().c_str());
    for (size_t i = 0; i < in.size() && s.ok(); ++i) {
      CHECK_OR_COUNT(out[i] == k.want[i], "%s [%zu]: got %u want %u", name.c_str(), i,
                     static_cast<unsigned>(out[i]), static_cast<unsigned>(k.want[i]));
    }
  }
}

void ScenarioMatrix(kolo::Client& c) {
  const DType dtypes[] = {DType::kUint8,   DType::kInt8,    DType::kInt16,   DType::kUint16,
                          DType::kInt32,   DType::kInt64,   DType::kFloat16, DType::kBFloat16,
                          DType::kFloat32, DType::kFloat64, DType::kBool};
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                          ReduceOp::kProduct};
  for (DType t : dtypes) {
    for (ReduceOp op : ops) {
      if (!kolo::ReducesWith(t, op)) {
        CheckAllreduceRefused(
            c, t, {.op = op},
            absl::StrCat("m/", kolo::DTypeName(t), "/", kolo::ReduceOpName(op), "/refused"));
        continue;
      }
      for (int64_t count : {0, 1, 7, 1000, 65537}) {
        for (bool zc : {true, false}) {
          CheckAllreduce(c, t, op, count, zc,
                         absl::StrCat("m/", kolo::DTypeName(t), "/", kolo::ReduceOpName(op), "/",
                                      count, zc ? "/z" : "/c"));
        }
      }
    }
  }
  // bool takes no scale factor.
  CheckAllreduceRefused(c, DType::kBool, {.op = ReduceOp::kMax, .prescale = 2.0},
                        "m/bool/prescale");
  CheckAllreduceRefused(c, DType::kBool, {.op = ReduceOp::kSum, .postscale = 0.5},
                        "m/bool/postscale");
  CheckUint16Range(c);
  // Scale factors: result = postscale * sum(prescale * x).
  std::vector<float> x(100);
  for (int i = 0; i < 100; ++i) x[i] = static_cast<float>(c.rank() + i);
  std::vector<float> y(100);
  absl::Status s = c.Allreduce(kolo::ConstTensorView(x.data(), DType::kFloat32, {10, 10}),
                               kolo::TensorView{y.data(), DType::kFloat32, {10, 10}}, "scaled",
                               {.op = ReduceOp::kSum, .prescale = 0.5, .postscale = 4.0});
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
  CheckAllreduce(c, DType::kFloat32, ReduceOp::kSum, (int64_t{64} << 20) / 4, false,
                 "size/64M/copy");
  // Large tensors go in parts (the last one short): every element reduced
  // once, in caller memory and in the arena, for several element sizes.
  for (DType t : {DType::kFloat64, DType::kInt8, DType::kFloat16}) {
    const int64_t count = (int64_t{5} << 20) / kolo::DTypeSize(t) + 3;
    for (bool zc : {false, true}) {
      CheckAllreduce(c, t, ReduceOp::kMax, count, zc,
                     absl::StrCat("size/parts/", kolo::DTypeName(t), zc));
    }
  }
  // A large broadcast in parts, average with both scales in parts.
  {
    const int64_t n = (int64_t{6} << 20) / 4 + 1;
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(c.rank() * 7 + i % 1000);
    const int root = c.size() - 1;
    absl::Status s =
        c.Broadcast(kolo::TensorView{v.data(), DType::kFloat32, {n}}, "size/parts/bcast", root);
    CHECK_OR_COUNT(s.ok(), "bcast in parts: %s", s.ToString().c_str());
    for (int64_t i = 0; i < n && s.ok(); ++i) {
      if (v[i] != static_cast<float>(root * 7 + i % 1000)) {
        CHECK_OR_COUNT(false, "bcast in parts [%ld]: got %g", static_cast<long>(i), v[i]);
        break;
      }
    }
    for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(c.rank() + 1);
    std::vector<float> out(n, -1.f);
    s = c.Allreduce(kolo::TensorView{v.data(), DType::kFloat32, {n, 1}},
                    kolo::TensorView{out.data(), DType::kFloat32, {n, 1}}, "size/parts/avg",
                    {.op = ReduceOp::kAverage, .prescale = 2.0, .postscale = 0.5});
    CHECK_OR_COUNT(s.ok(), "average in parts: %s", s.ToString().c_str());
    const float want = static_cast<float>(c.size() + 1) / 2;
    for (int64_t i = 0; i < n && s.ok(); ++i) {
      if (out[i] != want) {
        CHECK_OR_COUNT(false, "average in parts [%ld]: got %g want %g", static_cast<long>(i),
                       out[i], want);
        break;
      }
    }
  }
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
    for (DType t : {DType::kInt8, DType::kFloat16, DType::kFloat32, DType::kInt64, DType::kInt16,
                    DType::kUint16, DType::kBool}) {
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
        absl::Status s =
            c.Broadcast(kolo::TensorView{data, t, {n}},
                        absl::StrCat("bcast/", root, "/", kolo::DTypeName(t), zc), root);
        CHECK_OR_COUNT(s.ok(), "bcast: %s", s.ToString().c_str());
        for (int64_t i = 0; i < n && s.ok(); ++i) {
          if (Load(t, data, i) != Clamp(t, (root * 13 + i) % 100)) {
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
  CHECK_OR_COUNT(absl::StrContains(s.message(), "rank"), "%s: message names no rank: %s", what,
                 s.ToString().c_str());
}

// Tensors in parts submitted asynchronously in a different order on each
// rank and waited for in yet another order (backward hooks fire so): the
// parts of every tensor go on while the rank waits for any of them. Beside
// each, a small tensor whose name looks like a part's ("<name>#1") is in
// flight at the same time: parts are named apart from every tensor.
void ScenarioPartsInAnyOrder(kolo::Client& c) {
  constexpr int kTensors = 3;
  const int64_t n = (int64_t{5} << 20) / 4 + 7;
  std::vector<std::vector<float>> bufs(kTensors, std::vector<float>(n));
  for (int k = 0; k < kTensors; ++k) {
    for (int64_t i = 0; i < n; ++i) bufs[k][i] = static_cast<float>(c.rank() + k + i % 100);
  }
  // Rank 0 submits the small ones last, so elsewhere they are in flight
  // while every part is.
  std::vector<std::vector<float>> smalls(kTensors, std::vector<float>(4));
  std::vector<kolo::Handle> small_handles(kTensors);
  auto submit_smalls = [&] {
    for (int k = 0; k < kTensors; ++k) {
      std::fill(smalls[k].begin(), smalls[k].end(), static_cast<float>(c.rank() + 1));
      kolo::TensorView v{smalls[k].data(), DType::kFloat32, {4}};
      auto h = c.AllreduceAsync(v, v, absl::StrCat("parts/", k, "#1"), {.op = ReduceOp::kSum});
      CHECK_OR_COUNT(h.ok(), "submit small %d: %s", k, h.status().ToString().c_str());
      if (h.ok()) small_handles[k] = *h;
    }
  };
  if (c.rank() != 0) submit_smalls();
  std::vector<int> order(kTensors);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937 rng(99 + c.rank());
  std::shuffle(order.begin(), order.end(), rng);
  if (c.rank() % 2 == 1) std::reverse(order.begin(), order.end());
  std::vector<kolo::Handle> handles(kTensors);
  for (int k : order) {
    kolo::TensorView v{bufs[k].data(), DType::kFloat32, {n}};
    auto h = c.AllreduceAsync(v, v, absl::StrCat("parts/", k), {.op = ReduceOp::kSum});
    CHECK_OR_COUNT(h.ok(), "submit %d: %s", k, h.status().ToString().c_str());
    if (h.ok()) handles[k] = *h;
  }
  for (int k = kTensors - 1; k >= 0; --k) {
    absl::Status s = c.Wait(handles[k]);
    CHECK_OR_COUNT(s.ok(), "wait %d: %s", k, s.ToString().c_str());
    for (int64_t i = 0; i < n && s.ok(); ++i) {
      double want = 0;
      for (int r = 0; r < c.size(); ++r) want += r + k + i % 100;
      if (bufs[k][i] != want) {
        CHECK_OR_COUNT(false, "parts/%d[%ld]: got %g want %g", k, static_cast<long>(i), bufs[k][i],
                       want);
        break;
      }
    }
  }
  if (c.rank() == 0) submit_smalls();
  const float small_want = static_cast<float>(c.size() * (c.size() + 1) / 2);
  for (int k = 0; k < kTensors; ++k) {
    absl::Status s = c.Wait(small_handles[k]);
    CHECK_OR_COUNT(s.ok(), "wait small %d: %s", k, s.ToString().c_str());
    CHECK_OR_COUNT(!s.ok() || smalls[k][3] == small_want, "parts/%d#1: got %g want %g", k,
                   smalls[k][3], small_want);
  }
}

// Client::Underway: a tensor in parts is under way once every rank
// submitted it (its first part completed), and not before; any other
// collective once complete.
void ScenarioUnderway(kolo::Client& c) {
  const int64_t n = (int64_t{6} << 20) / 4;
  std::vector<float> big(n, static_cast<float>(c.rank() + 1));
  float go = 1;
  kolo::TensorView go_view{&go, DType::kFloat32, {1}};
  kolo::TensorView big_view{big.data(), DType::kFloat32, {n}};
  absl::StatusOr<kolo::Handle> h;
  if (c.rank() == 0) {
    // The others submit the big tensor only after "go", which waits for
    // this rank: its first part cannot complete yet.
    h = c.AllreduceAsync(big_view, big_view, "underway/big", {.op = ReduceOp::kSum});
    CHECK_OR_COUNT(h.ok(), "submit big: %s", h.status().ToString().c_str());
    if (!h.ok()) return;
    absl::StatusOr<bool> u = c.Underway(*h);
    CHECK_OR_COUNT(u.ok() && !*u, "under way before the others submitted: %s",
                   u.ok() ? "true" : u.status().ToString().c_str());
  }
  absl::Status s = c.Allreduce(go_view, go_view, "underway/go", ReduceOp::kSum);
  CHECK_OR_COUNT(s.ok(), "go: %s", s.ToString().c_str());
  if (c.rank() != 0) {
    h = c.AllreduceAsync(big_view, big_view, "underway/big", {.op = ReduceOp::kSum});
    CHECK_OR_COUNT(h.ok(), "submit big: %s", h.status().ToString().c_str());
    if (!h.ok()) return;
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  absl::StatusOr<bool> u = false;
  while (u.ok() && !*u && absl::Now() < deadline) {
    u = c.Underway(*h);
    if (u.ok() && !*u) absl::SleepFor(absl::Microseconds(100));
  }
  CHECK_OR_COUNT(u.ok() && *u, "never under way: %s",
                 u.ok() ? "false" : u.status().ToString().c_str());
  s = c.Wait(*h);
  CHECK_OR_COUNT(s.ok(), "wait big: %s", s.ToString().c_str());
  const float want = static_cast<float>(c.size() * (c.size() + 1) / 2);
  for (int64_t i = 0; i < n && s.ok(); ++i) {
    if (big[i] != want) {
      CHECK_OR_COUNT(false, "big[%ld]: got %g want %g", static_cast<long>(i), big[i], want);
      break;
    }
  }
  // A whole tensor is under way once complete; a consumed handle is unknown.
  go = 1;
  absl::StatusOr<kolo::Handle> small =
      c.AllreduceAsync(go_view, go_view, "underway/small", {.op = ReduceOp::kSum});
  CHECK_OR_COUNT(small.ok(), "submit small: %s", small.status().ToString().c_str());
  if (!small.ok()) return;
  absl::StatusOr<bool> done = c.TestFor(*small, absl::Seconds(60));
  CHECK_OR_COUNT(done.ok() && *done, "small not done: %s",
                 done.ok() ? "false" : done.status().ToString().c_str());
  u = c.Underway(*small);
  CHECK_OR_COUNT(u.ok() && *u, "small done but not under way");
  s = c.Wait(*small);
  CHECK_OR_COUNT(s.ok() && go == c.size(), "small: %s", s.ToString().c_str());
  u = c.Underway(*small);
  CHECK_OR_COUNT(u.status().code() == absl::StatusCode::kInvalidArgument, "a consumed handle: %s",
                 u.status().ToString().c_str());
}

}  // namespace kolo::testing::rank
