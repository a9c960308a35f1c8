// The collectives of the soak: each one is derived from its index alone (so
// every rank of a job derives the same), submitted without waiting, then
// waited for and checked element by element against the exact expected value.
//
// Thread-safety: SpecFor is a pure function; a Pending is owned by one thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kolo/kolo.h"

namespace kolo::soak {

enum class Kind { kAllreduce, kBroadcast, kAllgather, kReducescatter, kAlltoall };
inline constexpr int kNumKinds = 5;
const char* KindName(Kind k);

struct Spec {
  Kind kind = Kind::kAllreduce;
  DType dtype = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;  // allreduce and reducescatter
  // Allreduce and broadcast: the tensor's elements. Allgather, reducescatter
  // and alltoall: about the elements each rank sends (rows of `cols`).
  int64_t elements = 1;
  int64_t cols = 1;
  int root = 0;            // broadcast
  bool zero_copy = false;  // the input in the SDK's arena, else the process's memory
  int64_t salt = 0;        // shifts every value, so successive uses of a name differ
  std::string name;
};

// Collective `index` of a job of `size` ranks, of at most `max_elements`
// elements. `slot` (below the number in flight at once) keeps the names of
// collectives in flight together apart; most names recur (as a training
// step's do), a few are used once.
Spec SpecFor(uint64_t seed, uint64_t index, int slot, int size, int64_t max_elements);

// A submitted collective and the memory it uses until it completes.
struct Pending {
  Spec spec;
  std::vector<uint8_t> own;  // input and output in the process's memory
  HostBuffer shm;            // or in the session's arena
  Handle handle;
};

absl::StatusOr<Pending> Submit(Client& c, Spec spec);
// Waits for `p` and checks its result; the error names the collective, the
// element and the values.
absl::Status Complete(Client& c, Pending p);

}  // namespace kolo::soak
