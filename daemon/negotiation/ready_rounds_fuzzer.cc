// Fuzzes the direct rounds (ready_rounds.h) against hostile peers: messages
// of any round, bits, spills, plan counts and nudges from any node, mixed
// with this node's own names, spills, a leave and the coordinator's plans.
// Nothing may crash, a refused message changes nothing, and what runs is
// ascending and was ready here.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "daemon/negotiation/ready_rounds.h"
#include "tools/fuzz/fuzz_input.h"

namespace kolo::daemon {
namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

void Run(fuzz::FuzzInput& in) {
  const int nodes = 2 + in.Take<uint8_t>() % 4;
  const int self = in.Take<uint8_t>() % nodes;
  const int plans_node = in.Take<uint8_t>() % nodes;
  ReadyRounds rounds(nodes, self, plans_node);
  IdSet ready;  // what this node made ready and has not seen run or spill
  uint64_t plans = 0;
  for (int step = 0; step < 256 && !in.empty(); ++step) {
    switch (in.Take<uint8_t>() % 6) {
      case 0:
      case 1: {
        kolo::v1::ReadyRound m;
        const uint8_t how = in.Take<uint8_t>();
        m.set_round((how & 1) ? in.Take<uint64_t>() : rounds.round() + in.Take<uint8_t>() % 3);
        m.set_ready_bits(in.TakeString((how & 2) ? 9000 : 8));
        m.set_spill_bits(in.TakeString(4));
        m.set_off((how & 4) != 0);
        m.set_plans((how & 8) ? in.Take<uint64_t>() : in.Take<uint8_t>() % 4);
        m.set_nudge((how & 16) != 0);
        const int from = (how & 32) ? in.Take<int8_t>() : in.Take<uint8_t>() % nodes;
        (void)rounds.Receive(from, m);
        break;
      }
      case 2: {
        const uint32_t id = in.Take<uint8_t>() % 40;
        if (rounds.Takes(id) && !ready.contains(id)) {
          rounds.AddReady(id);
          ready.insert(id);
        }
        break;
      }
      case 3:
        rounds.Spill(in.Take<uint32_t>() % 48);
        break;
      case 4:
        if (in.Take<uint8_t>() % 8 == 0) rounds.Leave();
        break;
      case 5:
        plans += in.Take<uint8_t>() % 3;
        rounds.PlansSeen(plans);
        break;
    }
    ReadyRounds::Output out = rounds.Pump();
    Check(out.messages.size() <= 64);
    for (const auto& m : out.messages) {
      IdSet bits;
      Check(ParseIdBits(m.ready_bits(), &bits).ok());
    }
    for (const ReadyRounds::Event& e : out.events) {
      if (e.kind != ReadyRounds::Event::Kind::kRun && e.kind != ReadyRounds::Event::Kind::kSpill) {
        continue;
      }
      for (size_t i = 0; i < e.ids.size(); ++i) {
        Check(i == 0 || e.ids[i - 1] < e.ids[i]);
        Check(ready.erase(e.ids[i]) == 1);  // it was ready here
      }
    }
  }
}

}  // namespace
}  // namespace kolo::daemon

KOLO_FUZZ_TARGET(kolo::daemon::Run)
