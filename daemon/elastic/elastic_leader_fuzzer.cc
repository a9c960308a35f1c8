// Fuzzes the membership leader of elastic jobs with hostile Peer.Rendezvous
// reports from a few nodes (candidates with any ranks, ended epochs, node
// lists, sizes), in any order, and the node-side check of hostile answers.
// The leader never waits (poll 0), loses nodes at once, and may be handed an
// epoch it never formed (a successor). Nothing may crash; every epoch it
// forms passes the check the reporting node runs on it
// (ValidateElasticFormed) and places only candidates that node reported.
// crash_stale_result: an epoch formed from a node's earlier report answers
// its next one.
#include <cstdint>
#include <cstdlib>
#include <map>
#include <set>
#include <string>

#include "daemon/elastic/elastic_leader.h"
#include "tools/fuzz/fuzz_input.h"

namespace kolo::daemon {
namespace {

kolo::v1::ElasticReport ReportFrom(fuzz::FuzzInput& in) {
  kolo::v1::ElasticReport r;
  const uint8_t raw = in.Take<uint8_t>();
  r.set_job_id((raw & 1) ? in.TakeString(8) : "job");
  r.set_job_token((raw & 2) ? in.TakeString(4) : "token");
  const char node = static_cast<char>('a' + in.Take<uint8_t>() % 4);
  r.set_node(std::string(1, node));
  r.set_address(std::string(1, node) + ":1");
  r.set_ended_epoch((raw & 4) ? in.Take<uint64_t>() : in.Take<uint8_t>() % 4);
  r.set_epoch_ended(raw & 8);
  r.set_initial_size(static_cast<int32_t>(in.TakeSmall(raw & 16)));
  r.set_min_size(static_cast<int32_t>(in.TakeSmall(raw & 16)));
  r.set_max_size(static_cast<int32_t>(in.TakeSmall(raw & 16)));
  r.set_ended_leader(std::string(1, static_cast<char>('a' + in.Take<uint8_t>() % 4)));
  for (int i = in.Take<uint8_t>() % 4; i > 0; --i) {
    kolo::v1::ElasticNode* n = r.add_ended_nodes();
    n->set_node(std::string(1, static_cast<char>('a' + in.Take<uint8_t>() % 4)));
    n->set_address(in.TakeString(8));
    for (int k = in.Take<uint8_t>() % 4; k > 0; --k) n->add_ranks(in.Take<int8_t>());
  }
  for (int i = in.Take<uint8_t>() % 6; i > 0; --i) {
    kolo::v1::ElasticCandidate* c = r.add_candidates();
    c->set_id((raw & 32) ? in.TakeString(4) : std::to_string(in.Take<uint8_t>()));
    c->set_previous_rank(static_cast<int32_t>(in.TakeSmall(raw & 64)));
    c->set_previous_epoch(in.Take<uint8_t>() % 4);
    c->set_hint_rank(static_cast<int32_t>(in.TakeSmall(raw & 64)));
    c->set_joiner(in.Take<uint8_t>() & 1);
    c->set_arrival(in.Take<uint8_t>());
  }
  return r;
}

kolo::v1::ElasticFormed FormedFrom(fuzz::FuzzInput& in) {
  kolo::v1::ElasticFormed f;
  const uint8_t raw = in.Take<uint8_t>();
  f.set_epoch(in.Take<uint8_t>() % 3);
  f.set_size(static_cast<int32_t>(in.TakeSmall(raw & 1)));
  for (int i = in.Take<uint8_t>() % 6; i > 0; --i) {
    kolo::v1::ElasticPlacement* p = f.add_placements();
    p->set_id(in.TakeString(4));
    p->set_rank(static_cast<int32_t>(in.TakeSmall(raw & 2)));
  }
  for (int i = in.Take<uint8_t>() % 3; i > 0; --i) {
    kolo::v1::ElasticNode* n = f.add_nodes();
    n->set_node(in.TakeString(4));
    for (int k = in.Take<uint8_t>() % 4; k > 0; --k) n->add_ranks(in.Take<int8_t>());
  }
  f.set_coordinator(in.TakeString(8));
  return f;
}

void Run(fuzz::FuzzInput& in) {
  ElasticLeaderOptions options;
  options.lost_after = absl::ZeroDuration();
  options.poll = absl::ZeroDuration();
  options.max_jobs = 4;
  options.max_candidates = 64;
  ElasticLeaders leaders(options);
  std::map<std::string, std::set<std::string>> reported;  // candidate ids by node
  for (int step = 0; step < 24 && !in.empty(); ++step) {
    if (in.Take<uint8_t>() % 5 == 0) {
      (void)ValidateElasticFormed(FormedFrom(in), "a");  // hostile answers: no crash
      continue;
    }
    const kolo::v1::ElasticReport report = ReportFrom(in);
    std::set<std::string>& ids = reported[report.node()];
    for (const kolo::v1::ElasticCandidate& c : report.candidates()) ids.insert(c.id());
    absl::StatusOr<kolo::v1::ElasticFormed> got = leaders.Report(report);
    if (!got.ok() || got->epoch() == 0) continue;
    // The node's own check holds, and the leader placed only candidates
    // this node reported (in this report or, for an epoch formed before
    // the node asked again, an earlier one).
    fuzz::Require(ValidateElasticFormed(*got, report.node()).ok());
    for (const kolo::v1::ElasticPlacement& p : got->placements()) {
      fuzz::Require(ids.count(p.id()) > 0);
    }
    (void)leaders.JoinersWaiting("job", "token", "a");
  }
}

}  // namespace
}  // namespace kolo::daemon

KOLO_FUZZ_TARGET(kolo::daemon::Run)
