#include "daemon/algorithms/allreduce.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "daemon/algorithms/collective_test_util.h"
#include "daemon/transport/in_process_transport.h"
#include "gtest/gtest.h"
#include "kernels/cpu/reduce.h"

namespace kolo::daemon {
namespace {

constexpr uint64_t kTagBase = uint64_t{7} << 24;
constexpr DType kDTypes[] = {DType::kUint8,   DType::kInt8,    DType::kInt16,   DType::kUint16,
                             DType::kInt32,   DType::kInt64,   DType::kFloat16, DType::kBFloat16,
                             DType::kFloat32, DType::kFloat64, DType::kBool};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};

enum class Algo { kRing, kDoubling, kAuto };

absl::Status RunAlgo(Algo algo, Transport& t, void* buf, size_t count, DType dtype, ReduceOp op,
                     absl::Time deadline, size_t chunk_bytes) {
  switch (algo) {
    case Algo::kRing:
      return RingAllreduce(t, buf, count, dtype, op, kTagBase, deadline, chunk_bytes);
    case Algo::kDoubling:
      return RecursiveDoublingAllreduce(t, buf, count, dtype, op, kTagBase, deadline, chunk_bytes);
    case Algo::kAuto:
      return Allreduce(t, buf, count, dtype, op, kTagBase, deadline, chunk_bytes);
  }
  return absl::InternalError("unknown algorithm");
}

struct Param {
  int nodes;
  Algo algo;
};

std::string ParamName(const testing::TestParamInfo<Param>& info) {
  static constexpr const char* kNames[] = {"Ring", "Doubling", "Auto"};
  return absl::StrFormat("%s%d", kNames[static_cast<int>(info.param.algo)], info.param.nodes);
}

class AllreduceTest : public testing::TestWithParam<Param> {};

TEST_P(AllreduceTest, EveryDTypeAndOpMatchesSerialReference) {
  const int n = GetParam().nodes;
  const Algo algo = GetParam().algo;
  std::vector<size_t> counts = {0, 1, 7, static_cast<size_t>(n - 1), 1000};
  // The large count takes the ring in kAuto; run it for the explicit ones.
  if (algo != Algo::kAuto) counts.push_back((size_t{1} << 20) + 3);
  for (DType dtype : kDTypes) {
    for (ReduceOp op : kOps) {
      for (size_t count : counts) {
        SCOPED_TRACE(absl::StrFormat("%s %s count %d", DTypeName(dtype), ReduceOpName(op), count));
        // Small chunks make small counts exercise the pipeline too.
        const size_t chunk = count > 10000 ? (size_t{64} << 10) : 40;
        InProcessFabric fabric(n);
        std::vector<std::vector<std::byte>> bufs;
        for (int i = 0; i < n; ++i) bufs.push_back(TestData(dtype, op, i, count));
        const absl::Time deadline = absl::Now() + absl::Seconds(60);
        std::vector<absl::Status> results = RunOnNodes(n, [&](int i) {
          return RunAlgo(algo, fabric.endpoint(i), bufs[i].data(), count, dtype, op, deadline,
                         chunk);
        });
        const std::vector<std::byte> want = SerialReference(dtype, op, n, count);
        ASSERT_EQ(want.size(), count * DTypeSize(dtype));
        for (int i = 0; i < n; ++i) {
          ASSERT_TRUE(results[i].ok()) << "node " << i << ": " << results[i];
          ASSERT_TRUE(bufs[i] == want) << "node " << i << " differs";
        }
        EXPECT_EQ(fabric.outstanding(), 0u);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Nodes, AllreduceTest,
                         testing::Values(Param{1, Algo::kRing}, Param{2, Algo::kRing},
                                         Param{3, Algo::kRing}, Param{4, Algo::kRing},
                                         Param{5, Algo::kRing}, Param{1, Algo::kDoubling},
                                         Param{2, Algo::kDoubling}, Param{3, Algo::kDoubling},
                                         Param{4, Algo::kDoubling}, Param{5, Algo::kDoubling},
                                         Param{3, Algo::kAuto}, Param{5, Algo::kAuto}),
                         ParamName);

// Splits `bytes` into pieces of whole elements, a different layout per node
// (empty pieces, one-element pieces and pieces longer than a chunk), each
// piece in its own allocation.
std::vector<std::vector<std::byte>> SplitIntoPieces(const std::vector<std::byte>& data,
                                                    size_t esize, int node) {
  std::vector<std::vector<std::byte>> pieces;
  const size_t count = data.size() / esize;
  size_t at = 0;
  for (size_t i = 0; at < count; ++i) {
    const size_t want = (i * 7 + static_cast<size_t>(node) * 3) % 23;  // 0 .. 22 elements
    const size_t n = std::min(want, count - at);
    pieces.emplace_back(data.begin() + at * esize, data.begin() + (at + n) * esize);
    at += n;
  }
  return pieces;
}

// Pieced buffers: every node lays its tensors out differently, chunks
// straddle pieces, and the postscale is applied once.
TEST(PiecedAllreduceTest, MatchesSerialReferenceScaledForAnyLayout) {
  for (int n : {1, 2, 3, 5}) {
    for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kBool}) {
      const size_t esize = DTypeSize(dtype);
      const bool floating = dtype == DType::kFloat32 || dtype == DType::kFloat64;
      const double postscale = floating ? 0.25 : 1.0;
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
        // Through recursive doubling (packed) and the ring (in place).
        for (size_t count : {size_t{0}, size_t{5}, size_t{2000}, size_t{40000}}) {
          SCOPED_TRACE(absl::StrFormat("%d nodes %s %s count %d", n, DTypeName(dtype),
                                       ReduceOpName(op), count));
          InProcessFabric fabric(n);
          std::vector<std::vector<std::vector<std::byte>>> pieces;
          for (int i = 0; i < n; ++i) {
            pieces.push_back(SplitIntoPieces(TestData(dtype, op, i, count), esize, i));
          }
          const absl::Time deadline = absl::Now() + absl::Seconds(60);
          std::vector<absl::Status> results = RunOnNodes(n, [&](int i) {
            std::vector<BufferPiece> list;
            for (auto& p : pieces[i]) list.push_back({p.data(), p.size()});
            return Allreduce(fabric.endpoint(i), PiecedBuffer(list), dtype, op, postscale, kTagBase,
                             deadline, /*chunk_bytes=*/40 * esize);
          });
          std::vector<std::byte> want = SerialReference(dtype, op, n, count);
          if (count > 0 && postscale != 1.0) {
            void* dsts[] = {want.data()};
            ASSERT_TRUE(kernels::ScaleCopy(dtype, want.data(), dsts, count, postscale).ok());
          }
          for (int i = 0; i < n; ++i) {
            ASSERT_TRUE(results[i].ok()) << "node " << i << ": " << results[i];
            std::vector<std::byte> got;
            for (const auto& p : pieces[i]) got.insert(got.end(), p.begin(), p.end());
            ASSERT_TRUE(got == want) << "node " << i << " differs";
          }
          EXPECT_EQ(fabric.outstanding(), 0u);
        }
      }
    }
  }
}

TEST(PiecedAllreduceTest, RejectsMisalignedPieces) {
  InProcessFabric fabric(1);
  alignas(8) std::byte bytes[16] = {};
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  const std::vector<BufferPiece> odd = {{bytes, 4}, {bytes + 4, 6}};
  EXPECT_EQ(Allreduce(fabric.endpoint(0), PiecedBuffer(odd), DType::kFloat32, ReduceOp::kSum, 1.0,
                      kTagBase, deadline)
                .code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<BufferPiece> null_piece = {{nullptr, 4}};
  EXPECT_EQ(RingAllreduce(fabric.endpoint(0), PiecedBuffer(null_piece), DType::kFloat32,
                          ReduceOp::kSum, 1.0, kTagBase, deadline)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(AllreduceArgsTest, RejectsAverageBadTagBaseAndNullBuffer) {
  InProcessFabric fabric(1);
  float x = 1;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  EXPECT_EQ(
      Allreduce(fabric.endpoint(0), &x, 1, DType::kFloat32, ReduceOp::kAverage, kTagBase, deadline)
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      Allreduce(fabric.endpoint(0), &x, 1, DType::kFloat32, ReduceOp::kSum, kTagBase | 1, deadline)
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RingAllreduce(fabric.endpoint(0), nullptr, 4, DType::kFloat32, ReduceOp::kSum, kTagBase,
                          deadline)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Allreduce(fabric.endpoint(0), &x, 1, static_cast<DType>(99), ReduceOp::kSum, kTagBase,
                      deadline)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// Nodes 0..3 start a ring allreduce with node 4, which never joins. Once all
// four are blocked mid-collective, every endpoint is aborted (as the daemon
// does when it learns node 4 died): all return ABORTED at once.
TEST(AllreduceFaultTest, AbortMidCollectiveFailsEveryNodePromptly) {
  for (Algo algo : {Algo::kRing, Algo::kDoubling}) {
    constexpr int kNodes = 5;
    InProcessFabric fabric(kNodes);
    const size_t count = 100000;
    std::vector<std::vector<std::byte>> bufs;
    for (int i = 0; i < kNodes; ++i) {
      bufs.push_back(TestData(DType::kFloat32, ReduceOp::kSum, i, count));
    }
    const absl::Time start = absl::Now();
    const absl::Time deadline = start + absl::Seconds(120);
    std::vector<absl::Status> results;
    std::thread runner([&] {
      results = RunOnNodes(kNodes - 1, [&](int i) {
        return RunAlgo(algo, fabric.endpoint(i), bufs[i].data(), count, DType::kFloat32,
                       ReduceOp::kSum, deadline, 4096);
      });
    });
    const int participants[] = {0, 1, 2, 3};
    EXPECT_TRUE(fabric.AwaitInFlight(participants, deadline));
    for (int i = 0; i < kNodes; ++i) {
      fabric.endpoint(i).Abort(absl::UnavailableError("node 4 died"));
    }
    runner.join();
    EXPECT_LT(absl::Now() - start, absl::Seconds(30));
    for (int i = 0; i < kNodes - 1; ++i) {
      EXPECT_EQ(results[i].code(), absl::StatusCode::kAborted)
          << "node " << i << ": " << results[i];
      EXPECT_NE(results[i].message().find("node 4 died"), std::string::npos);
    }
    EXPECT_EQ(fabric.outstanding(), 0u);
  }
}

TEST(AllreduceFaultTest, MissingNodeHitsDeadline) {
  constexpr int kNodes = 3;
  InProcessFabric fabric(kNodes);
  const size_t count = 1 << 16;
  std::vector<std::vector<std::byte>> bufs;
  for (int i = 0; i < kNodes; ++i) {
    bufs.push_back(TestData(DType::kFloat32, ReduceOp::kSum, i, count));
  }
  const absl::Time deadline = absl::Now() + absl::Milliseconds(300);
  std::vector<absl::Status> results = RunOnNodes(kNodes - 1, [&](int i) {
    return Allreduce(fabric.endpoint(i), bufs[i].data(), count, DType::kFloat32, ReduceOp::kSum,
                     kTagBase, deadline);
  });
  for (const absl::Status& s : results) {
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  }
  EXPECT_GE(absl::Now(), deadline);
  EXPECT_EQ(fabric.outstanding(), 0u);
}

}  // namespace
}  // namespace kolo::daemon
