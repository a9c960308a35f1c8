// test_rank: one rank of an integration scenario. Started by the tests in
// this folder (or kolorun) with the KOLO_* environment; checks every result
// it gets and exits 0 only if all were right. The scenarios are in
// test_rank_*.cc.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kolo/kolo.h"
#include "tests/integration/test_rank.h"

namespace rank = kolo::testing::rank;

const struct {
  const char* name;
  void (*run)(kolo::Client&);
} kScenarios[] = {
    {"matrix", rank::ScenarioMatrix},
    {"sizes", rank::ScenarioSizes},
    {"inflight", rank::ScenarioInflight},
    {"parts_any_order", rank::ScenarioPartsInAnyOrder},
    {"underway", rank::ScenarioUnderway},
    {"broadcast", rank::ScenarioBroadcast},
    {"mismatch", rank::ScenarioMismatch},
    {"duplicate", rank::ScenarioDuplicate},
    {"rank_dies", rank::ScenarioRankDies},
    {"daemon_dies", rank::ScenarioDaemonDies},
    {"withhold", rank::ScenarioWithhold},
    {"withhold_cached", rank::ScenarioWithholdCached},
    {"surface", rank::ScenarioSurface},
    {"join", rank::ScenarioJoin},
    {"hold", rank::ScenarioHold},
    {"multinode_surface", rank::ScenarioMultiNodeSurface},
};

int main(int argc, char** argv) {
  std::string scenario = argc > 1 ? argv[1] : "matrix";
  auto options = kolo::ClientOptions::FromEnv();
  if (!options.ok()) {
    std::fprintf(stderr, "%s\n", options.status().ToString().c_str());
    return 2;
  }
  options->arena_bytes = uint64_t{320} << 20;
  // Tensors outside the arena go through the ranks' own memory where kolod
  // offers it (KOLO_CALLER_MEMORY=0 in the environment keeps them copied).
  if (std::getenv("KOLO_CALLER_MEMORY") == nullptr) options->caller_memory = true;
  auto client = kolo::Client::Connect(*options);
  if (!client.ok()) {
    std::fprintf(stderr, "connect: %s\n", client.status().ToString().c_str());
    return 2;
  }
  kolo::Client& c = **client;
  void (*run)(kolo::Client&) = nullptr;
  for (const auto& s : kScenarios) {
    if (scenario == s.name) run = s.run;
  }
  if (run == nullptr) {
    std::fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
    return 2;
  }
  run(c);
  std::printf("rank %d/%d %s: %s (%d failures)\n", c.rank(), c.size(), scenario.c_str(),
              rank::failures == 0 ? "ok" : "FAILED", rank::failures);
  return rank::failures == 0 ? 0 : 1;
}
