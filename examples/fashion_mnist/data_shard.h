// Splits a dataset among the ranks of a job for one epoch and assembles
// batches from it.
//
// Sharding: every rank draws the same permutation of [0, count) from
// (seed, epoch), and rank r takes positions r, r + size, r + 2*size, ... of
// it. Each rank keeps exactly count / size examples (the few left over are
// dropped for that epoch, a different few each epoch), so every rank runs the
// same number of steps with the same batch sizes, which the per-step
// allreduce needs.
//
// Thread-safety: the functions are reentrant.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "examples/fashion_mnist/idx_reader.h"

namespace kolo::fashion_mnist {

// A permutation of [0, count) that depends only on (seed, epoch): the
// Fisher-Yates shuffle over a 64-bit Mersenne Twister, with no
// library-defined distributions, so every rank and build agrees.
std::vector<int64_t> EpochPermutation(int64_t count, uint64_t seed, int epoch);

// Rank `rank`'s example indices for `epoch`, in training order; count / size
// of them. Requires 0 <= rank < size.
std::vector<int64_t> ShardForEpoch(int64_t count, int rank, int size, uint64_t seed, int epoch);

// Writes the examples `indices` of `data` into `x` ([indices.size(),
// pixels_per_image] floats scaled to [0, 1]) and `labels`.
void GatherBatch(const Dataset& data, std::span<const int64_t> indices, float* x, uint8_t* labels);

}  // namespace kolo::fashion_mnist
