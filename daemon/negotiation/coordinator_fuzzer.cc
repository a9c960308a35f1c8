// Fuzzes the Coordinator in-process, as the Peer service drives it: Hellos
// (right or wrong token and size, any ranks), Ready reports with metadata
// and cache bits from the input, heartbeats, aborts, lost members and ticks
// of a fake clock, all from one thread (the coordinator needs none of its
// own). Every member must receive plans numbered 0, 1, 2, ... and no
// message may arrive for a member after it was lost.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "daemon/negotiation/coordinator.h"
#include "daemon/negotiation/fuzz_messages.h"
#include "tools/fuzz/fuzz_input.h"

namespace kolo::daemon {
namespace {

struct CheckingSink : MemberSink {
  void Send(std::shared_ptr<const kolo::v1::CoordinatorMessage> message) override {
    const kolo::v1::CoordinatorMessage& m = *message;
    fuzz::Require(!lost);
    if (m.has_plan()) {
      fuzz::Require(m.plan().sequence() == next_sequence);
      ++next_sequence;
    }
  }
  uint64_t next_sequence = 0;
  bool lost = false;
};

constexpr int kJobSize = 4;
const char* const kNodes[] = {"A", "B", "C"};

void Run(fuzz::FuzzInput& in) {
  CoordinatorOptions options;
  options.fusion_threshold_bytes = 1 + in.Take<uint16_t>();
  options.cache_capacity = in.Take<uint8_t>() % 8;
  options.new_device_comm_id = [] { return std::string(128, 'n'); };
  Coordinator c("job", "tok", kJobSize, options);
  struct Joined {
    int id;
    std::shared_ptr<CheckingSink> sink;
  };
  std::vector<Joined> members;
  absl::Time now = absl::FromUnixSeconds(1'000'000);
  for (int step = 0; step < 64 && !in.empty(); ++step) {
    const uint8_t op = in.Take<uint8_t>();
    if (op % 6 == 0 || members.empty()) {
      kolo::v1::Hello h;
      h.set_job_id("job");
      h.set_job_token((op & 0x40) ? in.TakeString(8) : "tok");
      h.set_node(kNodes[(op >> 3) % 3]);
      h.set_size((op & 0x80) ? in.Take<int8_t>() : kJobSize);
      const uint8_t ranks = in.Take<uint8_t>();
      if (ranks & 0x80) {
        for (int i = in.Take<uint8_t>() % 6; i > 0; --i) h.add_ranks(in.Take<int8_t>());
      } else {
        for (int r = 0; r < kJobSize; ++r) {
          if (ranks & (1 << r)) h.add_ranks(r);
        }
      }
      h.set_ucx_address(in.TakeString(16));
      auto sink = std::make_shared<CheckingSink>();
      absl::StatusOr<int> id = c.AddMember(h, sink);
      if (id.ok()) members.push_back({*id, sink});
      continue;
    }
    const size_t pick = in.Take<uint8_t>() % members.size();
    const int member = members[pick].id;
    switch (op % 6) {
      case 1:
      case 2: {
        kolo::v1::Ready ready;
        for (int i = in.Take<uint8_t>() % 4; i > 0; --i) {
          *ready.add_tensors() = TensorMetaFrom(in, kJobSize);
        }
        if (op & 0x10) ready.set_cached_bits(in.TakeString(4));
        if (op & 0x20) {
          for (int i = in.Take<uint8_t>() % 4; i > 0; --i) {
            ready.mutable_devices()->add_ranks(in.Take<int8_t>());
            ready.mutable_devices()->add_devices(in.Take<int8_t>());
          }
        }
        c.OnReady(member, ready);
        break;
      }
      case 3:
        c.Heartbeat(member);
        break;
      case 4:
        if (op & 0x10) {
          c.OnAbort(member, absl::AbortedError("fuzz"));  // its stream stays open
        } else {
          members[pick].sink->lost = true;
          c.MemberLost(member, "fuzz");
          members.erase(members.begin() + static_cast<long>(pick));
        }
        break;
      case 5:
        now += absl::Seconds(in.Take<uint8_t>() % 20);
        (void)c.Tick(now, absl::Seconds(10));
        break;
    }
  }
}

}  // namespace
}  // namespace kolo::daemon

KOLO_FUZZ_TARGET(kolo::daemon::Run)
