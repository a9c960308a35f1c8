// Fuzzes the Coordinator in-process, as the Peer service drives it: Hellos
// (right or wrong token and size, any ranks), Ready reports with metadata
// and cache bits from the input, heartbeats, aborts, lost members and ticks
// of a fake clock, and Ready reports over the data plane's lane (any bytes,
// any node), all from one thread (the coordinator needs none of its own).
// Every member must receive plans numbered 0, 1, 2, ... over its sink and
// the lane together, and no message may arrive for a member after it was
// lost.
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "daemon/coordinator/coordinator.h"
#include "daemon/coordinator/fuzz_messages.h"
#include "tools/fuzz/fuzz_input.h"

namespace kolo::daemon {
namespace {

struct CheckingSink : MemberSink {
  void Send(std::shared_ptr<const kolo::v1::CoordinatorMessage> message) override {
    const kolo::v1::CoordinatorMessage& m = *message;
    fuzz::Require(!lost);
    if (m.has_welcome()) node_index = m.welcome().node_index();
    if (m.has_plan()) {
      fuzz::Require(m.plan().sequence() == next_sequence);
      ++next_sequence;
    }
  }
  uint64_t next_sequence = 0;
  bool lost = false;
  int node_index = -1;
};

// The lane: takes a plan or refuses it (then the member's sink gets it), as
// the input says; what it takes counts towards the member's sequence.
struct FuzzLane : MessageLane {
  void SetMessageHandler(Handler) override {}
  absl::Status SendMessage(int peer, std::shared_ptr<const std::string> message) override {
    if (refuse) return absl::UnavailableError("fuzz");
    kolo::v1::CoordinatorMessage m;
    // A name that is not UTF-8 (kolod refuses those at the slot; the fuzzer
    // calls OnReady directly) does not parse: refused, the sink takes it.
    if (!m.ParseFromString(*message)) return absl::InvalidArgumentError("unreadable");
    fuzz::Require(m.has_plan());
    auto it = by_node.find(peer);
    fuzz::Require(it != by_node.end());
    CheckingSink* sink = it->second.get();
    fuzz::Require(!sink->lost && m.plan().sequence() == sink->next_sequence);
    ++sink->next_sequence;
    return absl::OkStatus();
  }
  size_t max_message_bytes() const override { return 4096; }
  bool refuse = false;
  std::map<int, std::shared_ptr<CheckingSink>> by_node;  // from the Welcome
};

constexpr int kJobSize = 4;
const char* const kNodes[] = {"A", "B", "C"};

void Run(fuzz::FuzzInput& in) {
  CoordinatorOptions options;
  options.fusion_threshold_bytes = 1 + in.Take<uint16_t>();
  options.cache_capacity = in.Take<uint8_t>() % 8;
  options.new_device_comm_id = [] { return std::string(128, 'n'); };
  Coordinator c("job", "tok", kJobSize, options);
  FuzzLane lane;
  lane.refuse = in.Take<uint8_t>() & 1;
  c.UseLane(&lane);
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
      for (const Joined& j : members) {
        if (j.sink->node_index >= 0) lane.by_node[j.sink->node_index] = j.sink;
      }
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
        if (op & 0x08) {
          // Over the lane, said to come from any node, perhaps cut short.
          kolo::v1::MemberMessage m;
          *m.mutable_ready() = ready;
          std::string bytes = m.SerializeAsString();
          if (op & 0x04) bytes.resize(in.Take<uint8_t>() % (bytes.size() + 1));
          c.OnLaneMessage(in.Take<int8_t>() % 4, bytes);
        } else {
          c.OnReady(member, ready);
        }
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
