// Test helpers for Kolo's collective algorithms: per-node input data whose
// reduction is exact in every dtype (so results compare bit for bit), the
// serial reference, and running one function per node on its own thread.
//
// Thread-safety: the functions are reentrant.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "proto/kolo/abi/types.h"

namespace kolo::daemon {

// `count` elements of `dtype` for `node`: small integers (nonzero for
// kProduct), so sums, products, minima and maxima over up to 8 nodes are
// exact in every dtype, in any order. A bool is true where the integer is
// not zero, as that integer's low byte (so true bytes other than 1 occur).
std::vector<std::byte> TestData(DType dtype, ReduceOp op, int node, size_t count);

// The reduction of TestData over nodes 0 .. nodes-1, computed serially.
std::vector<std::byte> SerialReference(DType dtype, ReduceOp op, int nodes, size_t count);

// Runs fn(0) .. fn(nodes-1) on one thread each; returns their results.
std::vector<absl::Status> RunOnNodes(int nodes, const std::function<absl::Status(int)>& fn);

}  // namespace kolo::daemon
