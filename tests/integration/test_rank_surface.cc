// test_rank's scenarios of the whole collective surface: allgather,
// reducescatter, alltoall, process sets and join, on one node and across
// nodes.
#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/half.h"
#include "kolo/kolo.h"
#include "tests/integration/tensor_values.h"
#include "tests/integration/test_rank.h"

namespace kolo::testing::rank {

// Allgather of every dtype: rank r contributes r rows (rank 0 none) of
// 3 columns; `scale` multiplies the rows (large tensors).
void CheckAllgathers(kolo::Client& c, int64_t scale, const std::string& prefix) {
  const int rank = c.rank(), size = c.size();
  for (DType t : {DType::kFloat32, DType::kInt64, DType::kFloat16, DType::kUint8, DType::kInt16,
                  DType::kUint16, DType::kBool}) {
    const int64_t rows = rank * scale;
    std::vector<uint8_t> in(rows * 3 * kolo::DTypeSize(t) + 1);
    for (int64_t i = 0; i < rows * 3; ++i) Store(t, in.data(), i, (rank * 10 + i) % 100);
    auto out = c.Allgather(kolo::ConstTensorView(in.data(), t, {rows, 3}),
                           absl::StrCat(prefix, kolo::DTypeName(t)));
    CHECK_OR_COUNT(out.ok(), "allgather: %s", out.status().ToString().c_str());
    if (!out.ok()) continue;
    int64_t total = scale * size * (size - 1) / 2;
    CHECK_OR_COUNT(out->shape() == std::vector<int64_t>({total, 3}), "allgather shape");
    int64_t at = 0;
    for (int r = 0; r < size; ++r) {
      for (int64_t i = 0; i < r * scale * 3; ++i, ++at) {
        if (Load(t, out->data(), at) != Clamp(t, (r * 10 + i) % 100)) {
          CHECK_OR_COUNT(false, "allgather %s from rank %d [%ld]", kolo::DTypeName(t), r,
                         static_cast<long>(i));
          break;
        }
      }
    }
  }
}

// Reducescatter of `total_rows` rows of 2; lower ranks take the extra rows.
void CheckReducescatters(kolo::Client& c, int64_t total_rows, const std::string& prefix) {
  const int rank = c.rank(), size = c.size();
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
    std::vector<float> in(total_rows * 2);
    for (int64_t i = 0; i < total_rows * 2; ++i) in[i] = static_cast<float>(rank + i % 1000);
    auto out = c.Reducescatter(kolo::ConstTensorView(in.data(), DType::kFloat32, {total_rows, 2}),
                               absl::StrCat(prefix, kolo::ReduceOpName(op)), {.op = op});
    CHECK_OR_COUNT(out.ok(), "reducescatter: %s", out.status().ToString().c_str());
    if (!out.ok()) continue;
    int64_t first = 0;
    for (int r = 0; r < rank; ++r) first += total_rows / size + (r < total_rows % size ? 1 : 0);
    int64_t mine = total_rows / size + (rank < total_rows % size ? 1 : 0);
    CHECK_OR_COUNT(out->shape() == std::vector<int64_t>({mine, 2}), "reducescatter shape");
    for (int64_t i = 0; i < mine * 2; ++i) {
      double want = 0;
      for (int r = 0; r < size; ++r) want += r + (first * 2 + i) % 1000;
      if (op == ReduceOp::kAverage) want /= size;
      if (std::fabs(out->data_as<float>()[i] - want) >= 1e-3) {
        CHECK_OR_COUNT(false, "rs [%ld] %g want %g", static_cast<long>(i), out->data_as<float>()[i],
                       want);
        break;
      }
    }
  }
}

// Alltoall: rank r sends (r + j) % mod rows to rank j; a row is (r, j, k);
// then an even split without splits.
void CheckAlltoalls(kolo::Client& c, int mod, const std::string& prefix) {
  const int rank = c.rank(), size = c.size();
  std::vector<int64_t> splits(size);
  int64_t rows = 0;
  for (int j = 0; j < size; ++j) rows += splits[j] = (rank + j) % mod;
  std::vector<int32_t> in;
  for (int j = 0; j < size; ++j) {
    for (int64_t k = 0; k < splits[j]; ++k) {
      in.insert(in.end(), {rank, j, static_cast<int32_t>(k)});
    }
  }
  auto got = c.Alltoall(kolo::ConstTensorView(in.data(), DType::kInt32, {rows, 3}), splits,
                        prefix + "splits");
  CHECK_OR_COUNT(got.ok(), "alltoall: %s", got.status().ToString().c_str());
  if (got.ok()) {
    const int32_t* o = got->output.data_as<int32_t>();
    int64_t at = 0;
    for (int i = 0; i < size; ++i) {
      CHECK_OR_COUNT(got->received_splits[i] == (i + rank) % mod, "received split from %d", i);
      for (int64_t k = 0; k < (i + rank) % mod; ++k, ++at) {
        CHECK_OR_COUNT(o[at * 3] == i && o[at * 3 + 1] == rank && o[at * 3 + 2] == k,
                       "alltoall row from %d", i);
      }
    }
    CHECK_OR_COUNT(got->output.shape()[0] == at, "alltoall rows");
  }
  // Even split without splits.
  std::vector<float> even(size * 2);
  for (int i = 0; i < size * 2; ++i) even[i] = static_cast<float>(rank * 1000 + i);
  auto e = c.Alltoall(kolo::ConstTensorView(even.data(), DType::kFloat32, {size, 2}), {},
                      prefix + "even");
  CHECK_OR_COUNT(e.ok(), "alltoall even: %s", e.status().ToString().c_str());
  if (e.ok()) {
    for (int i = 0; i < size; ++i) {
      CHECK_OR_COUNT(e->output.data_as<float>()[i * 2] == i * 1000 + rank * 2,
                     "alltoall even from %d", i);
    }
  }
}

// Process sets: {0, last}; the same name runs in two sets at once.
void CheckProcessSets(kolo::Client& c, const std::string& prefix) {
  const int rank = c.rank(), size = c.size();
  auto ps = c.AddProcessSet({0, size - 1});
  CHECK_OR_COUNT(ps.ok() && *ps > 0, "add process set: %s", ps.status().ToString().c_str());
  if (!ps.ok()) return;
  const bool member = rank == 0 || rank == size - 1;
  CHECK_OR_COUNT(c.ProcessSetSize(*ps).value_or(-1) == 2, "set size");
  std::vector<float> v(4, static_cast<float>(rank + 1));
  if (member) {
    CHECK_OR_COUNT(c.ProcessSetRank(*ps).value_or(-1) == (rank == 0 ? 0 : 1), "set rank");
    auto h = c.AllreduceAsync(kolo::ConstTensorView(v.data(), DType::kFloat32, {4}),
                              kolo::TensorView{v.data(), DType::kFloat32, {4}},
                              prefix + "same-name", {.op = ReduceOp::kSum, .process_set = *ps});
    CHECK_OR_COUNT(h.ok() && c.Wait(*h).ok(), "set allreduce");
    CHECK_OR_COUNT(v[0] == 1 + size, "set allreduce value %g", v[0]);
    std::vector<float> b(4, static_cast<float>(rank));
    absl::Status bs = c.Broadcast(kolo::TensorView{b.data(), DType::kFloat32, {4}},
                                  prefix + "set-bcast", size - 1, {.process_set = *ps});
    CHECK_OR_COUNT(bs.ok() && b[0] == size - 1, "set broadcast: %s", bs.ToString().c_str());
  } else {
    absl::Status s = c.Allreduce(kolo::ConstTensorView(v.data(), DType::kFloat32, {4}),
                                 kolo::TensorView{v.data(), DType::kFloat32, {4}},
                                 prefix + "intruder", {.op = ReduceOp::kSum, .process_set = *ps});
    CHECK_OR_COUNT(s.code() == absl::StatusCode::kFailedPrecondition &&
                       absl::StrContains(s.message(), "is not in process set"),
                   "outsider: %s", s.ToString().c_str());
  }
  std::vector<float> g(4, 1.0f);
  absl::Status gs = c.Allreduce(kolo::ConstTensorView(g.data(), DType::kFloat32, {4}),
                                kolo::TensorView{g.data(), DType::kFloat32, {4}},
                                prefix + "same-name", ReduceOp::kSum);
  CHECK_OR_COUNT(gs.ok() && g[0] == size, "global same-name %g", g[0]);
  CHECK_OR_COUNT(c.RemoveProcessSet(*ps).ok(), "remove process set");
  if (member) {
    absl::Status s = c.Allreduce(kolo::ConstTensorView(v.data(), DType::kFloat32, {4}),
                                 kolo::TensorView{v.data(), DType::kFloat32, {4}}, prefix + "gone",
                                 {.op = ReduceOp::kSum, .process_set = *ps});
    CHECK_OR_COUNT(s.code() == absl::StatusCode::kFailedPrecondition, "removed set: %s",
                   s.ToString().c_str());
  }
  CHECK_OR_COUNT(c.Barrier().ok(), "barrier after sets");
}

// Allgather, reducescatter, alltoall, barrier, grouped collectives,
// compression, process sets and their error cases.
void ScenarioSurface(kolo::Client& c) {
  const int rank = c.rank(), size = c.size();
  CheckAllgathers(c, 1, "ag/");
  CheckReducescatters(c, 7, "rs/");
  CheckAlltoalls(c, 3, "a2a/");
  // Reducescatter and alltoall over more dtypes (sum of small integers is
  // exact in each; bool's sum is a logical or).
  for (DType t : {DType::kFloat64, DType::kInt32, DType::kInt64, DType::kFloat16, DType::kBFloat16,
                  DType::kInt8, DType::kUint8, DType::kInt16, DType::kUint16, DType::kBool}) {
    const int64_t rows = 2 * size + 1;
    std::vector<uint8_t> in(rows * 2 * kolo::DTypeSize(t));
    for (int64_t i = 0; i < rows * 2; ++i) Store(t, in.data(), i, (rank + i) % 7);
    auto out = c.Reducescatter(kolo::ConstTensorView(in.data(), t, {rows, 2}),
                               absl::StrCat("rs.t/", kolo::DTypeName(t)));
    CHECK_OR_COUNT(out.ok(), "reducescatter %s: %s", kolo::DTypeName(t),
                   out.status().ToString().c_str());
    if (out.ok()) {
      int64_t first = 0;
      for (int r = 0; r < rank; ++r) first += rows / size + (r < rows % size ? 1 : 0);
      for (int64_t i = 0; i < out->shape()[0] * 2; ++i) {
        double want = 0;
        for (int r = 0; r < size; ++r) want += (r + first * 2 + i) % 7;
        if (Load(t, out->data(), i) != Clamp(t, want) || !Canonical(t, out->data(), i)) {
          CHECK_OR_COUNT(false, "reducescatter %s [%ld]", kolo::DTypeName(t), static_cast<long>(i));
          break;
        }
      }
    }
    std::vector<uint8_t> a(size * kolo::DTypeSize(t));
    for (int j = 0; j < size; ++j) Store(t, a.data(), j, (rank * 3 + j) % 50);
    auto got = c.Alltoall(kolo::ConstTensorView(a.data(), t, {size}), {},
                          absl::StrCat("a2a.t/", kolo::DTypeName(t)));
    CHECK_OR_COUNT(got.ok(), "alltoall %s", kolo::DTypeName(t));
    if (got.ok()) {
      for (int i = 0; i < size; ++i) {
        CHECK_OR_COUNT(Load(t, got->output.data(), i) == Clamp(t, (i * 3 + rank) % 50),
                       "alltoall %s from %d", kolo::DTypeName(t), i);
      }
    }
  }
  // Process sets of several shapes: one rank, all but rank 0, every rank.
  {
    std::vector<std::vector<int>> shapes = {{0}, {}, {}};
    for (int r = 1; r < size; ++r) shapes[1].push_back(r);
    for (int r = 0; r < size; ++r) shapes[2].push_back(r);
    for (const auto& members : shapes) {
      if (members.empty()) continue;
      auto ps = c.AddProcessSet(members);
      CHECK_OR_COUNT(ps.ok(), "add set: %s", ps.status().ToString().c_str());
      if (!ps.ok()) continue;
      const bool in = std::find(members.begin(), members.end(), rank) != members.end();
      if (in) {
        std::vector<int32_t> v(3, rank);
        absl::Status st = c.Allreduce(kolo::ConstTensorView(v.data(), DType::kInt32, {3}),
                                      kolo::TensorView{v.data(), DType::kInt32, {3}}, "shape",
                                      {.op = ReduceOp::kSum, .process_set = *ps});
        int want = 0;
        for (int m : members) want += m;
        CHECK_OR_COUNT(st.ok() && v[0] == want, "set of %zu: %d want %d", members.size(), v[0],
                       want);
        std::vector<float> one(1, static_cast<float>(rank));
        auto ag = c.Allgather(kolo::ConstTensorView(one.data(), DType::kFloat32, {1}), "shape.ag",
                              {.process_set = *ps});
        CHECK_OR_COUNT(ag.ok() && ag->shape()[0] == static_cast<int64_t>(members.size()) &&
                           ag->data_as<float>()[0] == members[0],
                       "set allgather");
      }
      CHECK_OR_COUNT(c.RemoveProcessSet(*ps).ok(), "remove set");
    }
  }
  // Barrier, a few times.
  for (int i = 0; i < 3; ++i) {
    absl::Status b = c.Barrier();
    CHECK_OR_COUNT(b.ok(), "barrier: %s", b.ToString().c_str());
  }
  // Caller memory (one node, where the kernel names processes by pidfd): a
  // rank whose tensor is not mapped fails that collective on every rank
  // with an error naming it; kolod and the next collective are fine.
  if (c.caller_memory()) {
    const size_t bytes = 1 << 20;
    std::vector<float> good(bytes / 4, 1.0f);
    void* gone = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK_OR_COUNT(gone != MAP_FAILED, "mmap");
    munmap(gone, bytes);  // nothing else is mapped there until the next mmap
    void* mine = rank == 0 ? gone : good.data();
    kolo::TensorView v{mine, DType::kFloat32, {static_cast<int64_t>(bytes / 4)}};
    absl::Status bad = c.Allreduce(v, v, "caller/unmapped", ReduceOp::kSum);
    CHECK_OR_COUNT(bad.code() == absl::StatusCode::kInvalidArgument &&
                       absl::StrContains(bad.message(), "rank 0's tensor in its own memory") &&
                       absl::StrContains(bad.message(), "not mapped"),
                   "unmapped tensor: %s", bad.ToString().c_str());
    kolo::TensorView ok{good.data(), DType::kFloat32, {static_cast<int64_t>(bytes / 4)}};
    std::fill(good.begin(), good.end(), 1.0f);
    absl::Status after = c.Allreduce(ok, ok, "caller/after", ReduceOp::kSum);
    CHECK_OR_COUNT(after.ok() && good[0] == size && good.back() == size, "after: %s %f",
                   after.ToString().c_str(), good[0]);
  } else if (rank == 0) {
    std::printf("caller memory not offered (kernel without SO_PEERPIDFD?): skipped its checks\n");
  }
  // TestFor: rank 0's allreduce cannot complete before the others submit
  // theirs, which they do only after a barrier rank 0 enters after testing.
  {
    std::vector<float> v(4, 1.0f);
    const kolo::ConstTensorView in(v.data(), DType::kFloat32, {4});
    const kolo::TensorView out{v.data(), DType::kFloat32, {4}};
    if (rank == 0) {
      auto h = c.AllreduceAsync(in, out, "testfor", {.op = ReduceOp::kSum});
      CHECK_OR_COUNT(h.ok(), "testfor submit");
      if (h.ok()) {
        auto early = c.TestFor(*h, absl::Milliseconds(20));
        CHECK_OR_COUNT((early.ok() && !*early) || size == 1, "testfor: done before the others");
        CHECK_OR_COUNT(c.Barrier().ok(), "testfor barrier");
        auto late = c.TestFor(*h, absl::Seconds(30));
        CHECK_OR_COUNT(late.ok() && *late, "testfor: not done after the others submitted");
        CHECK_OR_COUNT(c.Wait(*h).ok() && v[0] == size, "testfor: result %f", v[0]);
      }
    } else {
      CHECK_OR_COUNT(c.Barrier().ok(), "testfor barrier");
      CHECK_OR_COUNT(c.Allreduce(in, out, "testfor", {.op = ReduceOp::kSum}).ok() && v[0] == size,
                     "testfor allreduce");
    }
  }
  // Grouped allreduce, allgather, reducescatter.
  {
    std::vector<std::vector<float>> data(5, std::vector<float>(10));
    std::vector<kolo::ConstTensorView> ins;
    std::vector<kolo::TensorView> outs;
    std::vector<std::string> names;
    for (int k = 0; k < 5; ++k) {
      for (int i = 0; i < 10; ++i) data[k][i] = static_cast<float>(rank + k + i);
      ins.push_back(kolo::ConstTensorView(data[k].data(), DType::kFloat32, {10}));
      outs.push_back(kolo::TensorView{data[k].data(), DType::kFloat32, {10}});
      names.push_back(absl::StrCat("group/g", k));
    }
    auto hs = c.GroupedAllreduceAsync(ins, outs, names);
    CHECK_OR_COUNT(hs.ok(), "grouped allreduce");
    if (hs.ok()) {
      for (auto h : *hs) CHECK_OR_COUNT(c.Wait(h).ok(), "grouped wait");
      for (int k = 0; k < 5; ++k) {
        double want = 0;
        for (int r = 0; r < size; ++r) want += r + k + 3;
        CHECK_OR_COUNT(data[k][3] == want, "grouped allreduce %d: %g", k, data[k][3]);
      }
    }
    auto ag = c.GroupedAllgatherAsync({ins[0], ins[1]}, {"group/ag0", "group/ag1"});
    CHECK_OR_COUNT(ag.ok(), "grouped allgather");
    if (ag.ok()) {
      for (auto h : *ag) {
        auto out = c.WaitForOutput(h);
        CHECK_OR_COUNT(out.ok() && out->shape()[0] == 10 * size, "grouped allgather out");
      }
    }
    auto rs = c.GroupedReducescatterAsync({ins[2]}, {"group/rs0"});
    CHECK_OR_COUNT(rs.ok(), "grouped reducescatter");
    if (rs.ok()) CHECK_OR_COUNT(c.WaitForOutput((*rs)[0]).ok(), "grouped rs out");
  }
  // Compression: float16 on the wire.
  {
    std::vector<float> x(64);
    for (int i = 0; i < 64; ++i) x[i] = 1.0f + (rank + 1) * 0.001234f * i;
    std::vector<float> y(64);
    absl::Status s =
        c.Allreduce(kolo::ConstTensorView(x.data(), DType::kFloat32, {64}),
                    kolo::TensorView{y.data(), DType::kFloat32, {64}}, "compressed",
                    {.op = ReduceOp::kSum, .compression = kolo::Compression::kFloat16});
    CHECK_OR_COUNT(s.ok(), "compressed: %s", s.ToString().c_str());
    for (int i = 0; i < 64 && s.ok(); ++i) {
      float acc = 0;
      for (int r = 0; r < size; ++r) {
        acc +=
            kolo::kernels::HalfToFloat(kolo::kernels::FloatToHalf(1.0f + (r + 1) * 0.001234f * i));
      }
      float want = kolo::kernels::HalfToFloat(kolo::kernels::FloatToHalf(acc));
      CHECK_OR_COUNT(y[i] == want, "compressed [%d] %.7g want %.7g", i, y[i], want);
    }
  }
  CheckProcessSets(c, "");
  // Mismatches: allgather columns, alltoall splits, reducescatter op.
  {
    std::vector<float> buf(64, 1.0f);
    auto ag = c.Allgather(
        kolo::ConstTensorView(buf.data(), DType::kFloat32, {2, rank == 0 ? 3 : 4}), "bad/ag");
    CHECK_OR_COUNT(ag.status().code() == absl::StatusCode::kFailedPrecondition,
                   "allgather mismatch: %s", ag.status().ToString().c_str());
    std::vector<int64_t> bad(size, 0);
    bad[0] = 3;  // sums to 3, the tensor has 2 rows
    auto a2a =
        c.Alltoall(kolo::ConstTensorView(buf.data(), DType::kFloat32, {2, 2}), bad, "bad/a2a");
    CHECK_OR_COUNT(a2a.status().code() == absl::StatusCode::kFailedPrecondition &&
                       absl::StrContains(a2a.status().message(), "splits sum to 3"),
                   "alltoall splits: %s", a2a.status().ToString().c_str());
    auto rs = c.Reducescatter(kolo::ConstTensorView(buf.data(), DType::kFloat32, {4}), "bad/rs",
                              {.op = rank == 0 ? ReduceOp::kSum : ReduceOp::kAverage});
    CHECK_OR_COUNT(rs.status().code() == absl::StatusCode::kFailedPrecondition,
                   "reducescatter op: %s", rs.status().ToString().c_str());
  }
}

// Uneven data: rank r runs 2 (r + 1) steps, then joins. Joined ranks
// contribute zeros; join returns the last rank to join.
void ScenarioJoin(kolo::Client& c) {
  const int rank = c.rank(), size = c.size();
  const int steps = 2 * (rank + 1);
  for (int k = 0; k < steps; ++k) {
    std::vector<float> g(8, static_cast<float>(rank + 1));
    absl::Status s = c.Allreduce(kolo::ConstTensorView(g.data(), DType::kFloat32, {8}),
                                 kolo::TensorView{g.data(), DType::kFloat32, {8}},
                                 absl::StrCat("step.", k), ReduceOp::kSum);
    CHECK_OR_COUNT(s.ok(), "step %d: %s", k, s.ToString().c_str());
    double want = 0;
    for (int r = 0; r < size; ++r) {
      if (2 * (r + 1) > k) want += r + 1;
    }
    CHECK_OR_COUNT(g[0] == want, "step %d: %g want %g", k, g[0], want);
    std::vector<float> m(2, static_cast<float>(rank + 1));
    s = c.Allreduce(kolo::ConstTensorView(m.data(), DType::kFloat32, {2}),
                    kolo::TensorView{m.data(), DType::kFloat32, {2}}, absl::StrCat("min.", k),
                    ReduceOp::kMin);
    // A joined rank's zero is the minimum once anyone has joined.
    double want_min = k >= 2 ? 0.0 : 1.0;
    CHECK_OR_COUNT(s.ok() && m[0] == want_min, "min step %d: %g", k, m[0]);
  }
  if (rank == size - 1) {
    // Every other rank has joined or will: an allgather cannot run now.
    std::vector<float> a(2, 1.0f);
    auto ag = c.Allgather(kolo::ConstTensorView(a.data(), DType::kFloat32, {1, 2}), "ag.joined");
    CHECK_OR_COUNT(ag.status().code() == absl::StatusCode::kFailedPrecondition &&
                       absl::StrContains(ag.status().message(), "joined"),
                   "allgather with joined ranks: %s", ag.status().ToString().c_str());
  }
  auto last = c.Join();
  CHECK_OR_COUNT(last.ok() && *last == size - 1, "join returned %d (%s)", last.value_or(-1),
                 last.status().ToString().c_str());
  // After everyone joined, the job goes on normally.
  CheckAllreduce(c, DType::kFloat32, ReduceOp::kSum, 5, true, "after-join");
}

// Every rank waits on a name only it submits; something outside ends the
// job (a peer daemon dies, stops or is cut off). Prints what it saw.
void ScenarioHold(kolo::Client& c) {
  CheckAllreduce(c, DType::kFloat32, ReduceOp::kSum, 16, true, "warmup");
  std::vector<float> buf(4, 1.0f);
  kolo::TensorView v{buf.data(), DType::kFloat32, {4}};
  absl::Status s = WaitOnOwnName(c, v, "hold/", "holding");
  CHECK_OR_COUNT(!s.ok(), "the held collective completed");
  std::printf("ended: %s\n", s.ToString().c_str());
}

// In a job spanning nodes: grouped and compressed allreduce, allgather,
// reducescatter, alltoall, process sets (every collective on them) and join
// work (many sizes, steps, mismatches), and allreduce goes on working.
void ScenarioMultiNodeSurface(kolo::Client& c) {
  std::vector<float> buf(4, 1.0f);
  // Process sets span nodes: allreduce and broadcast on {0, last}, the same
  // name in two sets at once, outsiders refused, removal.
  CheckProcessSets(c, "mn/");
  {
    auto ps = c.AddProcessSet({0, c.size() - 1});
    CHECK_OR_COUNT(ps.ok(), "add process set: %s", ps.status().ToString().c_str());
    if (ps.ok()) {
      const int size = c.size();
      const int pos = c.rank() == 0 ? 0 : 1;  // position in the set {0, last}
      if (c.rank() == 0 || c.rank() == size - 1) {
        // Allgather: position p contributes p+1 rows of (rank, i).
        std::vector<float> in;
        for (int i = 0; i <= pos; ++i) in.insert(in.end(), {float(c.rank()), float(i)});
        auto ag = c.Allgather(kolo::ConstTensorView(in.data(), DType::kFloat32, {pos + 1, 2}),
                              "mn/ps-ag", {.process_set = *ps});
        CHECK_OR_COUNT(ag.ok() && ag->shape()[0] == 3, "allgather on a set: %s",
                       ag.status().ToString().c_str());
        if (ag.ok()) {
          const float* o = ag->data_as<float>();
          CHECK_OR_COUNT(o[0] == 0 && o[2] == size - 1 && o[4] == size - 1 && o[5] == 1,
                         "allgather on a set: values");
        }
        // Reducescatter of 5 rows: position 0 takes 3, position 1 takes 2.
        std::vector<float> rs_in(10);
        for (int i = 0; i < 10; ++i) rs_in[i] = static_cast<float>(i);
        auto rs = c.Reducescatter(kolo::ConstTensorView(rs_in.data(), DType::kFloat32, {5, 2}),
                                  "mn/ps-rs", {.op = ReduceOp::kSum, .process_set = *ps});
        CHECK_OR_COUNT(rs.ok() && rs->shape()[0] == (pos == 0 ? 3 : 2), "reducescatter on a set");
        if (rs.ok()) {
          CHECK_OR_COUNT(rs->data_as<float>()[0] == (pos == 0 ? 0.0f : 12.0f),
                         "reducescatter on a set: %g", rs->data_as<float>()[0]);
        }
        // Alltoall: position p sends p+1 rows to each position.
        std::vector<float> a2a_in(2 * (pos + 1), static_cast<float>(c.rank()));
        auto at = c.Alltoall(kolo::ConstTensorView(a2a_in.data(), DType::kFloat32, {2 * (pos + 1)}),
                             {pos + 1, pos + 1}, "mn/ps-a2a", {.process_set = *ps});
        CHECK_OR_COUNT(at.ok() && at->output.shape()[0] == 3 && at->received_splits[0] == 1 &&
                           at->received_splits[1] == 2,
                       "alltoall on a set: %s", at.status().ToString().c_str());
        if (at.ok()) {
          const float* o = at->output.data_as<float>();
          CHECK_OR_COUNT(o[0] == 0 && o[1] == size - 1 && o[2] == size - 1,
                         "alltoall on a set: values");
        }
      }
      CHECK_OR_COUNT(c.RemoveProcessSet(*ps).ok(), "remove the second set");
    }
    auto last = c.Join();
    CHECK_OR_COUNT(last.ok() && *last >= 0 && *last < c.size(), "join across nodes: %s",
                   last.status().ToString().c_str());
  }
  // Alltoall spans nodes: uneven splits (some empty), even splits, large.
  CheckAlltoalls(c, 3, "mn/a2a3/");
  CheckAlltoalls(c, 1000, "mn/a2a-large/");
  {
    // Splits that do not add up fail on every node.
    std::vector<float> in(4, 1.0f);
    std::vector<int64_t> bad(c.size(), 0);
    bad[0] = c.rank() == 1 ? 5 : 4;
    auto r = c.Alltoall(kolo::ConstTensorView(in.data(), DType::kFloat32, {4}), bad, "mn/a2a-bad");
    CHECK_OR_COUNT(!r.ok(), "alltoall with bad splits completed");
  }
  // Grouped allreduce across nodes.
  {
    const int size = c.size();
    std::vector<std::vector<float>> bufs(3);
    std::vector<kolo::ConstTensorView> ins;
    std::vector<kolo::TensorView> outs;
    for (int t = 0; t < 3; ++t) {
      bufs[t].assign(10 + t * 1000, static_cast<float>(c.rank() + t));
      const int64_t n = static_cast<int64_t>(bufs[t].size());
      ins.push_back(kolo::ConstTensorView(bufs[t].data(), DType::kFloat32, {n}));
      outs.push_back(kolo::TensorView{bufs[t].data(), DType::kFloat32, {n}});
    }
    auto hs = c.GroupedAllreduceAsync(ins, outs, {"mn/g0", "mn/g1", "mn/g2"});
    CHECK_OR_COUNT(hs.ok(), "grouped allreduce: %s", hs.status().ToString().c_str());
    if (hs.ok()) {
      for (int t = 0; t < 3; ++t) {
        CHECK_OR_COUNT(c.Wait((*hs)[t]).ok(), "grouped member %d", t);
        const float want = static_cast<float>(size * (size - 1) / 2 + size * t);
        CHECK_OR_COUNT(bufs[t].front() == want && bufs[t].back() == want,
                       "grouped member %d: %g want %g", t, bufs[t].front(), want);
      }
    }
  }
  // Compressed allreduce across nodes: small integers survive 16 bits.
  for (kolo::Compression comp : {kolo::Compression::kFloat16, kolo::Compression::kBFloat16}) {
    const int size = c.size();
    std::vector<float> x(100003);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(c.rank() + i % 8);
    absl::Status s = c.Allreduce(
        kolo::ConstTensorView(x.data(), DType::kFloat32, {static_cast<int64_t>(x.size())}),
        kolo::TensorView{x.data(), DType::kFloat32, {static_cast<int64_t>(x.size())}},
        absl::StrCat("mn/compressed/", static_cast<int>(comp)),
        {.op = ReduceOp::kSum, .compression = comp});
    CHECK_OR_COUNT(s.ok(), "compressed across nodes: %s", s.ToString().c_str());
    for (size_t i = 0; i < x.size() && s.ok(); ++i) {
      const float want = static_cast<float>(size * (size - 1) / 2 + size * (i % 8));
      if (x[i] != want) {
        CHECK_OR_COUNT(false, "compressed [%zu] %g want %g", i, x[i], want);
        break;
      }
    }
  }
  // Reducescatter spans nodes: fewer rows than ranks, uneven, large.
  CheckReducescatters(c, 3, "mn/rs3/");
  CheckReducescatters(c, 7, "mn/rs7/");
  CheckReducescatters(c, 300001, "mn/rs-large/");
  // Allgather spans nodes: small, large, repeated (never a cache bit: the
  // rows may change), and in flight with allreduces.
  CheckAllgathers(c, 1, "mn/ag/");
  CheckAllgathers(c, 40000, "mn/ag-large/");
  for (int step = 0; step < 3; ++step) CheckAllgathers(c, step + 1, "mn/ag-step/");
  {
    std::vector<float> x(8, static_cast<float>(c.rank()));
    auto h = c.AllreduceAsync(kolo::ConstTensorView(x.data(), DType::kFloat32, {8}),
                              kolo::TensorView{x.data(), DType::kFloat32, {8}}, "mn/ar-mixed");
    CheckAllgathers(c, 2, "mn/ag-mixed/");
    CHECK_OR_COUNT(h.ok() && c.Wait(*h).ok(), "allreduce beside allgathers");
    CHECK_OR_COUNT(x[0] == static_cast<float>(c.size() * (c.size() - 1) / 2), "allreduce value");
  }
  // Ranks that disagree on the row shape fail on every node.
  {
    std::vector<float> in(4 * (2 + (c.rank() % 2)), 1.0f);
    auto bad = c.Allgather(
        kolo::ConstTensorView(in.data(), DType::kFloat32, {4, 2 + (c.rank() % 2)}), "mn/ag-bad");
    CHECK_OR_COUNT(bad.status().code() == absl::StatusCode::kFailedPrecondition,
                   "mismatched allgather: %s", bad.status().ToString().c_str());
  }
  CHECK_OR_COUNT(c.Barrier().ok(), "barrier across nodes");
  CheckAllreduce(c, DType::kFloat32, ReduceOp::kSum, 100, true, "mn/after");
}

}  // namespace kolo::testing::rank
