// test_rank's scenarios of collectives that fail: ranks that disagree, a
// name submitted twice, a rank or its daemon that dies, a rank that
// withholds a tensor.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kolo/kolo.h"
#include "tests/integration/tensor_values.h"
#include "tests/integration/test_rank.h"

namespace kolo::testing::rank {

void ScenarioMismatch(kolo::Client& c) {
  // The last rank disagrees (on another node in a multi-node job).
  const int r = c.rank() == c.size() - 1 ? 1 : 0;
  // Tensors large enough to go in parts (on one node): the same bytes in
  // another shape, and another size, fail as whole tensors do, on every
  // rank, and leave nothing behind (the allreduce after them completes).
  {
    std::vector<float> big((int64_t{8} << 20) / 4 + 64, 1.0f);
    const int64_t n = (int64_t{8} << 20) / 4;
    ExpectMismatch(
        c,
        c.Allreduce(
            kolo::TensorView{big.data(), DType::kFloat32, {r == 1 ? n / 2 : n / 4, r == 1 ? 2 : 4}},
            kolo::TensorView{big.data(), DType::kFloat32, {r == 1 ? n / 2 : n / 4, r == 1 ? 2 : 4}},
            "big/shape", ReduceOp::kSum),
        "shape in parts");
    ExpectMismatch(c,
                   c.Allreduce(kolo::TensorView{big.data(), DType::kFloat32, {n + 16 * r}},
                               kolo::TensorView{big.data(), DType::kFloat32, {n + 16 * r}},
                               "big/size", ReduceOp::kSum),
                   "size in parts");
    std::vector<float> one(4, 1.0f);
    absl::Status after = c.Allreduce(kolo::TensorView{one.data(), DType::kFloat32, {4}},
                                     kolo::TensorView{one.data(), DType::kFloat32, {4}},
                                     "big/after", ReduceOp::kSum);
    CHECK_OR_COUNT(after.ok() && one[0] == c.size(), "after the mismatches in parts: %s",
                   after.ToString().c_str());
  }
  {
    // A name every node has cached (across nodes it then negotiates in
    // direct rounds between them) changes shape on the last node: that node
    // reports it to the coordinator, the others follow at the next round's
    // close, every rank gets the mismatch, and the name goes on once agreed
    // again. (On one node the last rank differs instead.)
    const bool last_node = c.local_size() < c.size() ? c.rank() >= c.size() - c.local_size()
                                                     : c.rank() == c.size() - 1;
    std::vector<float> v(8, 1.0f);
    auto step = [&](int64_t n) {
      std::fill(v.begin(), v.end(), 1.0f);
      return c.Allreduce(kolo::TensorView{v.data(), DType::kFloat32, {n}},
                         kolo::TensorView{v.data(), DType::kFloat32, {n}}, "cached/w",
                         ReduceOp::kSum);
    };
    for (int i = 0; i < 4; ++i) {
      absl::Status s = step(4);
      CHECK_OR_COUNT(s.ok() && v[0] == c.size(), "cached/w step %d: %s (%f)", i,
                     s.ToString().c_str(), v[0]);
    }
    ExpectMismatch(c, step(last_node ? 8 : 4), "a cached name's shape");
    for (int i = 0; i < 3; ++i) {
      absl::Status s = step(4);
      CHECK_OR_COUNT(s.ok() && v[0] == c.size() && v[3] == c.size(), "cached/w again %d: %s", i,
                     s.ToString().c_str());
    }
  }
  std::vector<float> buf(64, 1.0f);
  // Shape.
  ExpectMismatch(c,
                 c.Allreduce(kolo::TensorView{buf.data(), DType::kFloat32, {4, r == 1 ? 5 : 4}},
                             kolo::TensorView{buf.data(), DType::kFloat32, {4, r == 1 ? 5 : 4}},
                             "grad/w1", ReduceOp::kSum),
                 "shape");
  // Dtype.
  DType t = r == 1 ? DType::kInt32 : DType::kFloat32;
  ExpectMismatch(c,
                 c.Allreduce(kolo::TensorView{buf.data(), t, {4}},
                             kolo::TensorView{buf.data(), t, {4}}, "dtype", ReduceOp::kSum),
                 "dtype");
  // Op.
  ExpectMismatch(c,
                 c.Allreduce(kolo::TensorView{buf.data(), DType::kFloat32, {4}},
                             kolo::TensorView{buf.data(), DType::kFloat32, {4}}, "op",
                             r == 1 ? ReduceOp::kMax : ReduceOp::kSum),
                 "op");
  // Scale factors.
  ExpectMismatch(c,
                 c.Allreduce(kolo::TensorView{buf.data(), DType::kFloat32, {4}},
                             kolo::TensorView{buf.data(), DType::kFloat32, {4}}, "scale",
                             {.op = ReduceOp::kSum, .prescale = r == 1 ? 2.0 : 1.0}),
                 "prescale");
  // Root.
  ExpectMismatch(
      c, c.Broadcast(kolo::TensorView{buf.data(), DType::kFloat32, {4}}, "root", r == 1 ? 1 : 0),
      "root");
  // Refused by one rank's own checks (the others' requests are fine): the
  // refusing rank gets its own error at once, every other rank the
  // refusal, naming the rank and its reason, instead of waiting.
  {
    // A broadcast root outside the job.
    absl::Status s = c.Broadcast(kolo::TensorView{buf.data(), DType::kFloat32, {4}}, "refused/root",
                                 r == 1 ? c.size() + 3 : 0);
    if (r == 1) {
      CHECK_OR_COUNT(s.code() == absl::StatusCode::kInvalidArgument, "refused root here: %s",
                     s.ToString().c_str());
    } else {
      ExpectMismatch(c, s, "refused root");
      CHECK_OR_COUNT(absl::StrContains(s.message(), "refused it") &&
                         absl::StrContains(s.message(), "root rank"),
                     "refused root elsewhere: %s", s.ToString().c_str());
    }
  }
  {
    // A reduction op the dtype does not have (average of bool).
    std::vector<uint8_t> flags(4, 1);
    const DType t = r == 1 ? DType::kBool : DType::kUint8;
    const ReduceOp op = r == 1 ? ReduceOp::kAverage : ReduceOp::kSum;
    absl::Status s = c.Allreduce(kolo::TensorView{flags.data(), t, {4}},
                                 kolo::TensorView{flags.data(), t, {4}}, "refused/op", op);
    if (r == 1) {
      CHECK_OR_COUNT(s.code() == absl::StatusCode::kInvalidArgument, "refused op here: %s",
                     s.ToString().c_str());
    } else {
      ExpectMismatch(c, s, "refused op");
      CHECK_OR_COUNT(absl::StrContains(s.message(), "has no average"), "refused op elsewhere: %s",
                     s.ToString().c_str());
    }
  }
  {
    // A grouped allgather with one member refused here: the whole group
    // fails everywhere.
    std::vector<float> a(6, 1.0f), b(6, 2.0f);
    std::vector<kolo::ConstTensorView> in = {
        kolo::ConstTensorView(a.data(), DType::kFloat32, {3, 2}),
        kolo::ConstTensorView(b.data(), DType::kFloat32,
                              r == 1 ? std::vector<int64_t>{} : std::vector<int64_t>{3, 2})};
    auto hs = c.GroupedAllgatherAsync(in, {"refused/g0", "refused/g1"});
    if (r == 1) {
      CHECK_OR_COUNT(!hs.ok() && hs.status().code() == absl::StatusCode::kInvalidArgument,
                     "refused group here: %s", hs.status().ToString().c_str());
    } else if (!hs.ok()) {
      CHECK_OR_COUNT(false, "refused group submit elsewhere: %s", hs.status().ToString().c_str());
    } else {
      for (const kolo::Handle& h : *hs) {
        auto out = c.WaitForOutput(h);
        ExpectMismatch(c, out.status(), "refused group member");
      }
    }
  }
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
    absl::Status g =
        c.Allreduce(kolo::TensorView{go.data(), DType::kFloat32, {1}},
                    kolo::TensorView{go.data(), DType::kFloat32, {1}}, "go", ReduceOp::kSum);
    CHECK_OR_COUNT(g.ok(), "go");
    absl::Status s1 = c.Wait(*h1);
    CHECK_OR_COUNT(s1.ok() && a[0] == c.size(), "dup first: %s %g", s1.ToString().c_str(), a[0]);
  } else {
    std::vector<float> go(1, 1.0f);
    absl::Status g =
        c.Allreduce(kolo::TensorView{go.data(), DType::kFloat32, {1}},
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

absl::Status WaitOnOwnName(kolo::Client& c, kolo::TensorView v, const std::string& prefix,
                           const char* announce) {
  auto h = c.AllreduceAsync(v, v, absl::StrCat(prefix, c.rank()));
  CHECK_OR_COUNT(h.ok(), "submit");
  if (!h.ok()) return h.status();
  std::printf("%s\n", announce);
  std::fflush(stdout);
  return c.Wait(*h);
}

// Waits on a collective that never completes; the test kills kolod.
void ScenarioDaemonDies(kolo::Client& c) {
  std::vector<float> buf(4, 1.0f);
  kolo::TensorView v{buf.data(), DType::kFloat32, {4}};
  absl::Status s = WaitOnOwnName(c, v, "never/", "waiting");
  absl::Time dead = absl::Now();
  CHECK_OR_COUNT(s.code() == absl::StatusCode::kUnavailable, "wait: %s", s.ToString().c_str());
  absl::Status again = c.Allreduce(v, v, "again", ReduceOp::kSum);
  CHECK_OR_COUNT(again.code() == absl::StatusCode::kUnavailable, "again: %s",
                 again.ToString().c_str());
  CHECK_OR_COUNT(absl::Now() - dead < absl::Seconds(2), "second call was slow");
  std::printf("saw: %s\n", s.ToString().c_str());
}

// The last rank submits "other/tensor" where every other rank submits
// "grad/w1" (in `v`), and each waits for its own: it never completes.
static void WithholdFromLast(kolo::Client& c, kolo::TensorView v) {
  const bool withholder = c.rank() == c.size() - 1;
  auto h = c.AllreduceAsync(v, v, withholder ? "other/tensor" : "grad/w1");
  CHECK_OR_COUNT(h.ok(), "submit");
  std::printf("%s\n", withholder ? "withholding" : "submitted");
  std::fflush(stdout);
  absl::Status s = c.Wait(*h);
  CHECK_OR_COUNT(!s.ok(), "the withheld collective completed");
  std::printf("ended: %s\n", s.ToString().c_str());
}

// The last rank withholds "grad/w1"; everyone else submits it and waits. Each
// rank exits 0 once the job is ended from outside (an operator's abort or the
// stall timeout) and prints the status it saw.
void ScenarioWithhold(kolo::Client& c) {
  CheckAllreduce(c, DType::kFloat32, ReduceOp::kSum, 16, true, "warmup");
  std::vector<float> buf(16, 1.0f);
  WithholdFromLast(c, kolo::TensorView{buf.data(), DType::kFloat32, {16}});
}

// Every rank allreduces "grad/w1" three times (every node then has it cached,
// so across nodes it negotiates in direct rounds), then the last rank
// withholds it as above.
void ScenarioWithholdCached(kolo::Client& c) {
  std::vector<float> buf(16, 1.0f);
  kolo::TensorView v{buf.data(), DType::kFloat32, {16}};
  for (int i = 0; i < 3; ++i) {
    absl::Status s = c.Allreduce(v, v, "grad/w1", ReduceOp::kSum);
    CHECK_OR_COUNT(s.ok(), "grad/w1 step %d: %s", i, s.ToString().c_str());
  }
  WithholdFromLast(c, v);
}

}  // namespace kolo::testing::rank
