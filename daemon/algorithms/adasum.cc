#include "daemon/algorithms/adasum.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "daemon/algorithms/allreduce.h"
#include "daemon/algorithms/collective_common.h"
#include "kernels/cpu/adasum.h"

namespace kolo::daemon {
namespace {

using kernels::AdasumCoefficientsOf;
using kernels::AdasumProducts;

// Message indices of one phase: a level, or a level's product exchanges
// (at most 32 levels: UCX caps nodes at 2^16).
constexpr uint64_t kMaxLevels = 32;

int LargestPowerOfTwoAtMost(int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

// One operand of the tree: its data, and whether the tree may write it.
struct Operand {
  const std::byte* data = nullptr;
  std::byte* owned = nullptr;
};

// a op b into an operand the tree owns (a's or b's buffer where it has one).
absl::Status CombinePair(DType dtype, size_t count, const Operand& a, const Operand& b,
                         std::vector<std::unique_ptr<std::byte[]>>& scratch, Operand* out) {
  std::byte* dst = a.owned != nullptr ? a.owned : b.owned;
  if (dst == nullptr) {
    scratch.push_back(std::make_unique<std::byte[]>(count * DTypeSize(dtype)));
    dst = scratch.back().get();
  }
  AdasumProducts p;
  KOLO_RETURN_IF_ERROR(kernels::AdasumAccumulate(dtype, a.data, b.data, count, &p));
  KOLO_RETURN_IF_ERROR(
      kernels::AdasumCombine(dtype, a.data, b.data, dst, count, AdasumCoefficientsOf(p)));
  *out = Operand{dst, dst};
  return absl::OkStatus();
}

// Real node index of virtual node `v` (as in recursive doubling: the odd
// node of each folded pair stands for the pair).
int RealNode(int v, int extra) { return v < extra ? 2 * v + 1 : v + extra; }

// The tensors overlapping [lo, hi): for each, its part of that range.
struct TensorPiece {
  size_t tensor;
  size_t begin;
  size_t end;
};
std::vector<TensorPiece> PiecesOf(absl::Span<const size_t> ends, size_t lo, size_t hi) {
  std::vector<TensorPiece> pieces;
  size_t begin = 0;
  for (size_t t = 0; t < ends.size(); begin = ends[t], ++t) {
    const size_t b = std::max(begin, lo), e = std::min(ends[t], hi);
    if (b < e) pieces.push_back({t, b, e});
  }
  return pieces;
}

absl::Status CheckEnds(const Transport& transport, absl::Span<const size_t> ends, size_t count) {
  if (ends.empty() || ends.back() != count ||
      !std::is_sorted(ends.begin(), ends.end())) {
    return absl::InvalidArgumentError(
        absl::StrCat("adasum on node ", transport.node(),
                     ": tensor ends must ascend to the element count ", count));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status AdasumTree(DType dtype, absl::Span<const void* const> inputs, void* out,
                        size_t count, double scale) {
  if (!IsFloatingPoint(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("adasum takes floating-point tensors, not ", DTypeName(dtype)));
  }
  if (inputs.empty()) return absl::InvalidArgumentError("adasum of no tensors");
  const size_t bytes = count * DTypeSize(dtype);
  if (count == 0) return absl::OkStatus();
  const int n = static_cast<int>(inputs.size());
  const int p = LargestPowerOfTwoAtMost(n);
  const int extra = n - p;
  std::vector<std::unique_ptr<std::byte[]>> scratch;
  std::vector<Operand> level(p);
  for (int v = 0; v < p; ++v) {
    if (v < extra) {
      const Operand a{static_cast<const std::byte*>(inputs[2 * v]), nullptr};
      const Operand b{static_cast<const std::byte*>(inputs[2 * v + 1]), nullptr};
      KOLO_RETURN_IF_ERROR(CombinePair(dtype, count, a, b, scratch, &level[v]));
    } else {
      level[v] = Operand{static_cast<const std::byte*>(inputs[v + extra]), nullptr};
    }
  }
  for (int width = p; width > 1; width /= 2) {
    for (int v = 0; v < width / 2; ++v) {
      KOLO_RETURN_IF_ERROR(
          CombinePair(dtype, count, level[2 * v], level[2 * v + 1], scratch, &level[v]));
    }
  }
  if (level[0].data != out) std::memmove(out, level[0].data, bytes);
  return kernels::AdasumScale(dtype, out, count, scale);
}

absl::Status AdasumAllreduce(Transport& transport, void* buffer, size_t count, DType dtype,
                             absl::Span<const size_t> tensor_ends, uint64_t tag_base,
                             absl::Time deadline) {
  const char* kWhat = "adasum";
  if (!IsFloatingPoint(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("adasum on node ", transport.node(),
                                                   ": takes floating-point tensors, not ",
                                                   DTypeName(dtype)));
  }
  const size_t esize = DTypeSize(dtype);
  KOLO_RETURN_IF_ERROR(CheckCollectiveArgs(transport, kWhat, buffer, count * esize, tag_base,
                                           kDefaultChunkBytes));
  KOLO_RETURN_IF_ERROR(CheckEnds(transport, tensor_ends, count));
  const int n = transport.nodes();
  const int r = transport.node();
  if (n == 1 || count == 0) return absl::OkStatus();

  const int p = LargestPowerOfTwoAtMost(n);
  const int extra = n - p;
  const bool folded_away = r < 2 * extra && r % 2 == 0;
  const int v = r < 2 * extra ? r / 2 : r - extra;
  auto* base = static_cast<std::byte*>(buffer);
  const size_t tensors = tensor_ends.size();

  // The largest receive: the whole buffer where a node folds another in,
  // else the first level's half.
  const size_t scratch_elems = r < 2 * extra ? count : count - count / 2;
  auto scratch = std::make_unique<std::byte[]>(scratch_elems * esize);
  std::vector<double> products(3 * tensors), theirs(3 * tensors);
  PendingTransfers pending(transport, deadline);  // after the buffers it moves

  auto swap = [&](int peer, uint64_t tag, const void* send, size_t send_bytes, void* recv,
                  size_t recv_bytes) -> absl::Status {
    Transport::Ticket t[2];
    size_t k = 0;
    if (recv != nullptr) {
      KOLO_ASSIGN_OR_RETURN(t[k++], pending.Recv(peer, tag, recv, recv_bytes));
    }
    if (send != nullptr) {
      KOLO_ASSIGN_OR_RETURN(t[k++], pending.Send(peer, tag, send, send_bytes));
    }
    return pending.Wait(absl::MakeConstSpan(t, k));
  };
  // Combines [lo, hi) of each tensor: a and b hold that range (a the lower
  // operand's), `sums` the tensors' whole products; the result goes to dst.
  auto combine = [&](const std::byte* a, const std::byte* b, std::byte* dst, size_t lo,
                     size_t hi, const std::vector<double>& sums) -> absl::Status {
    for (const TensorPiece& piece : PiecesOf(tensor_ends, lo, hi)) {
      const AdasumProducts whole{sums[3 * piece.tensor], sums[3 * piece.tensor + 1],
                                 sums[3 * piece.tensor + 2]};
      const size_t at = (piece.begin - lo) * esize;
      KOLO_RETURN_IF_ERROR(kernels::AdasumCombine(dtype, a + at, b + at, dst + at,
                                                  piece.end - piece.begin,
                                                  AdasumCoefficientsOf(whole)));
    }
    return absl::OkStatus();
  };
  // The products of each tensor's part of [lo, hi), a and b as for combine.
  auto accumulate = [&](const std::byte* a, const std::byte* b, size_t lo, size_t hi,
                        std::vector<double>* into) -> absl::Status {
    std::fill(into->begin(), into->end(), 0.0);
    for (const TensorPiece& piece : PiecesOf(tensor_ends, lo, hi)) {
      AdasumProducts part;
      const size_t at = (piece.begin - lo) * esize;
      KOLO_RETURN_IF_ERROR(kernels::AdasumAccumulate(dtype, a + at, b + at,
                                                     piece.end - piece.begin, &part));
      (*into)[3 * piece.tensor] = part.dot;
      (*into)[3 * piece.tensor + 1] = part.a_norm_sq;
      (*into)[3 * piece.tensor + 2] = part.b_norm_sq;
    }
    return absl::OkStatus();
  };

  // 1. Fold in: the even node of each of the first `extra` pairs hands its
  // buffer to the odd one, which combines the pair whole.
  if (r < 2 * extra) {
    const uint64_t tag = MessageTag(tag_base, CollectivePhase::kAdasumFoldIn, 0);
    if (folded_away) {
      KOLO_RETURN_IF_ERROR(swap(r + 1, tag, base, count * esize, nullptr, 0));
    } else {
      KOLO_RETURN_IF_ERROR(swap(r - 1, tag, nullptr, 0, scratch.get(), count * esize));
      KOLO_RETURN_IF_ERROR(accumulate(scratch.get(), base, 0, count, &products));
      KOLO_RETURN_IF_ERROR(combine(scratch.get(), base, base, 0, count, products));
    }
  }

  if (!folded_away) {
    // 2. Vector halving, distance doubling. At level k the partner differs
    // in bit k; the 2^(k+1) virtual nodes that agree above bit k hold the
    // two operands' parts between them, and add up their products.
    struct Range {
      size_t lo, hi;
    };
    std::vector<Range> parents;
    size_t lo = 0, hi = count;
    int level = 0;
    for (int mask = 1; mask < p; mask <<= 1, ++level) {
      const int peer = RealNode(v ^ mask, extra);
      const bool lower = (v & mask) == 0;
      const size_t mid = lo + (hi - lo) / 2;
      const size_t keep_lo = lower ? lo : mid, keep_hi = lower ? mid : hi;
      const size_t give_lo = lower ? mid : lo, give_hi = lower ? hi : mid;
      parents.push_back({lo, hi});
      KOLO_RETURN_IF_ERROR(swap(peer, MessageTag(tag_base, CollectivePhase::kAdasumHalving, level),
                                base + give_lo * esize, (give_hi - give_lo) * esize,
                                scratch.get(), (keep_hi - keep_lo) * esize));
      std::byte* mine = base + keep_lo * esize;
      const std::byte* a = lower ? mine : scratch.get();
      const std::byte* b = lower ? scratch.get() : mine;
      KOLO_RETURN_IF_ERROR(accumulate(a, b, keep_lo, keep_hi, &products));
      // Recursive doubling of the products among the group: x + y on one
      // side and y + x on the other are the same double, so every node of
      // the group ends with the same sums, bit for bit.
      uint64_t step = 0;
      for (int m = 1; m <= mask; m <<= 1, ++step) {
        const uint64_t tag = MessageTag(tag_base, CollectivePhase::kAdasumProducts,
                                        static_cast<uint64_t>(level) * kMaxLevels + step);
        KOLO_RETURN_IF_ERROR(swap(RealNode(v ^ m, extra), tag, products.data(),
                                  products.size() * sizeof(double), theirs.data(),
                                  theirs.size() * sizeof(double)));
        for (size_t i = 0; i < products.size(); ++i) products[i] += theirs[i];
      }
      KOLO_RETURN_IF_ERROR(combine(a, b, mine, keep_lo, keep_hi, products));
      lo = keep_lo;
      hi = keep_hi;
    }
    // 3. The pieces travel back: at each level, from the top, partners swap
    // their halves of the range they shared.
    for (int k = level - 1; k >= 0; --k) {
      const int peer = RealNode(v ^ (1 << k), extra);
      const Range parent = parents[k];
      const bool lower = (v & (1 << k)) == 0;  // it kept the parent's first half
      const size_t other_lo = lower ? hi : parent.lo;
      const size_t other_hi = lower ? parent.hi : lo;
      KOLO_RETURN_IF_ERROR(swap(peer, MessageTag(tag_base, CollectivePhase::kAdasumDoubling, k),
                                base + lo * esize, (hi - lo) * esize, base + other_lo * esize,
                                (other_hi - other_lo) * esize));
      lo = parent.lo;
      hi = parent.hi;
    }
  }

  // 4. Fold out: the odd node of each folded pair returns the result.
  if (r < 2 * extra) {
    const uint64_t tag = MessageTag(tag_base, CollectivePhase::kAdasumFoldOut, 0);
    if (folded_away) {
      KOLO_RETURN_IF_ERROR(swap(r + 1, tag, nullptr, 0, base, count * esize));
    } else {
      KOLO_RETURN_IF_ERROR(swap(r - 1, tag, base, count * esize, nullptr, 0));
    }
  }
  return absl::OkStatus();
}

}  // namespace kolo::daemon
