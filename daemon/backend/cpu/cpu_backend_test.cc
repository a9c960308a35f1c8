#include "daemon/backend/cpu/cpu_backend.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "common/unique_fd.h"
#include "daemon/core/caller_memory.h"
#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

// More elements than one caller-memory piece (128 KiB) holds, so every
// rank's tensor is read and written in several pieces.
constexpr int64_t kElements = 100000;

// This process, as kolod reaches a rank whose tensors are in its own memory.
std::shared_ptr<const CallerMemory> ThisProcess() {
  UniqueFd pidfd(static_cast<int>(syscall(SYS_pidfd_open, getpid(), 0)));
  absl::StatusOr<std::shared_ptr<const CallerMemory>> m = CallerMemory::OfPidfd(std::move(pidfd));
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *m : nullptr;
}

Request HostRequest(int rank, CollectiveKind kind, std::vector<float>& data) {
  Request q;
  q.rank = rank;
  q.kind = kind;
  q.shape = {kElements};
  q.bytes = kElements * sizeof(float);
  q.input = reinterpret_cast<const uint8_t*>(data.data());
  q.output = reinterpret_cast<uint8_t*>(data.data());
  return q;
}

// The same, with the tensor in the caller's memory: no arena pointers.
Request CallerRequest(int rank, CollectiveKind kind, std::vector<float>& data,
                      std::shared_ptr<const CallerMemory> caller) {
  Request q = HostRequest(rank, kind, data);
  q.input = nullptr;
  q.output = nullptr;
  q.caller = std::move(caller);
  q.caller_input = q.caller_output = reinterpret_cast<uint64_t>(data.data());
  return q;
}

Response OneMember(CollectiveKind kind, std::vector<Request> requests) {
  Response r;
  r.kind = kind;
  r.total_bytes = requests.front().bytes;
  FusedMember m;
  m.set.name = "t";
  m.set.set_size = static_cast<int>(requests.size());
  m.set.requests = std::move(requests);
  r.members.push_back(std::move(m));
  return r;
}

class CpuBackendTest : public ::testing::Test {
 protected:
  WorkerPool pool_{2};
  CpuBackend backend_{&pool_};
};

// Ranks in the caller's memory and in the arena side by side, over many
// pieces: every rank gets the sum.
TEST_F(CpuBackendTest, AllreduceMixesCallerMemoryAndArenaTensors) {
  std::shared_ptr<const CallerMemory> self = ThisProcess();
  ASSERT_NE(self, nullptr);
  std::vector<std::vector<float>> data(3, std::vector<float>(kElements));
  for (int rank = 0; rank < 3; ++rank) {
    for (int64_t i = 0; i < kElements; ++i) data[rank][i] = static_cast<float>(rank + i % 7);
  }
  std::vector<Request> requests;
  requests.push_back(CallerRequest(0, CollectiveKind::kAllreduce, data[0], self));
  requests.push_back(HostRequest(1, CollectiveKind::kAllreduce, data[1]));
  requests.push_back(CallerRequest(2, CollectiveKind::kAllreduce, data[2], self));
  Response r = OneMember(CollectiveKind::kAllreduce, std::move(requests));
  ASSERT_TRUE(backend_.Execute(r, StepContext{}).ok());
  for (int rank = 0; rank < 3; ++rank) {
    for (int64_t i = 0; i < kElements; ++i) {
      ASSERT_EQ(data[rank][i], static_cast<float>(3 + 3 * (i % 7))) << rank << " " << i;
    }
  }
}

// A root in the caller's memory broadcasts to both kinds of rank.
TEST_F(CpuBackendTest, BroadcastFromARootInCallerMemory) {
  std::shared_ptr<const CallerMemory> self = ThisProcess();
  ASSERT_NE(self, nullptr);
  std::vector<std::vector<float>> data(3, std::vector<float>(kElements, -1.0f));
  for (int64_t i = 0; i < kElements; ++i) data[1][i] = static_cast<float>(i % 11);
  std::vector<Request> requests;
  requests.push_back(HostRequest(0, CollectiveKind::kBroadcast, data[0]));
  requests.push_back(CallerRequest(1, CollectiveKind::kBroadcast, data[1], self));
  requests.push_back(CallerRequest(2, CollectiveKind::kBroadcast, data[2], self));
  Response r = OneMember(CollectiveKind::kBroadcast, std::move(requests));
  r.root_rank = 1;
  ASSERT_TRUE(backend_.Execute(r, StepContext{}).ok());
  for (int rank = 0; rank < 3; ++rank) {
    for (int64_t i = 0; i < kElements; ++i) {
      ASSERT_EQ(data[rank][i], static_cast<float>(i % 11)) << rank << " " << i;
    }
  }
}

}  // namespace
}  // namespace kolo::daemon
