#include "daemon/elastic/elastic_leader.h"

#include <algorithm>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/job_id.h"
#include "common/secret_compare.h"
#include "spdlog/spdlog.h"

namespace kolo::daemon {
namespace {

constexpr int kMaxSize = 1 << 20;
constexpr size_t kMaxNameBytes = 256;
// How often a waiting report looks at the clock (lost nodes).
constexpr absl::Duration kTick = absl::Milliseconds(20);
// A leader nobody reported to for this long is dropped.
constexpr absl::Duration kIdleAfter = absl::Minutes(10);
// A report this old no longer counts as ranks waiting (nodes poll every
// half second).
constexpr absl::Duration kReportFresh = absl::Seconds(3);

}  // namespace

absl::Status ValidateElasticReport(const kolo::v1::ElasticReport& r, int max_candidates) {
  if (!ValidJobId(r.job_id())) {
    return absl::InvalidArgumentError(
        "rendezvous: job_id must be 1-128 characters of [A-Za-z0-9._:-]");
  }
  if (r.job_token().empty() || r.job_token().size() > 256) {
    return absl::InvalidArgumentError("rendezvous: job_token must be 1-256 bytes");
  }
  if (r.node().empty() || r.node().size() > kMaxNameBytes || r.address().size() > kMaxNameBytes ||
      r.ended_leader().size() > kMaxNameBytes || r.reason().size() > 1024) {
    return absl::InvalidArgumentError(
        "rendezvous: node, address and ended_leader must be at most 256 bytes (node not empty), "
        "reason at most 1024");
  }
  if (r.candidates_size() > max_candidates || r.ended_nodes_size() > max_candidates) {
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous: at most ", max_candidates, " candidates and ended nodes"));
  }
  int64_t ranks = 0;
  for (const kolo::v1::ElasticNode& n : r.ended_nodes()) {
    if (n.node().empty() || n.node().size() > kMaxNameBytes || n.address().size() > kMaxNameBytes) {
      return absl::InvalidArgumentError("rendezvous: an ended node's name or address is bad");
    }
    ranks += n.ranks_size();
  }
  if (ranks > max_candidates) {
    return absl::InvalidArgumentError("rendezvous: the ended nodes list too many ranks");
  }
  for (const kolo::v1::ElasticCandidate& c : r.candidates()) {
    if (c.id().empty() || c.id().size() > 64 || c.previous_rank() < -1 ||
        c.previous_rank() >= kMaxSize || c.hint_rank() < 0 || c.hint_rank() >= kMaxSize) {
      return absl::InvalidArgumentError(
          absl::StrCat("rendezvous: a candidate's id (1-64 bytes) or ranks (previous in [-1, ",
                       kMaxSize, "), hint in [0, ", kMaxSize, ")) are bad"));
    }
  }
  if (r.initial_size() < 0 || r.initial_size() > kMaxSize || r.min_size() < 0 ||
      r.min_size() > kMaxSize || r.max_size() < 0 || r.max_size() > kMaxSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous: sizes must lie in [0, ", kMaxSize, "]"));
  }
  return absl::OkStatus();
}

absl::Status ValidateElasticFormed(const kolo::v1::ElasticFormed& f, const std::string& node) {
  if (f.epoch() == 0) return absl::OkStatus();  // not yet
  if (f.size() < 1 || f.size() > kMaxSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous answer: size ", f.size(), " outside [1, ", kMaxSize, "]"));
  }
  if (f.placements_size() > f.size() || f.nodes_size() > f.size()) {
    return absl::InvalidArgumentError("rendezvous answer: more placements or nodes than ranks");
  }
  if (f.coordinator().size() > 256 || f.leader().size() > 256 || f.reason().size() > 4096 ||
      (f.nodes_size() > 1 && f.coordinator().empty())) {
    return absl::InvalidArgumentError(
        "rendezvous answer: coordinator (needed across nodes) or leader over 256 bytes, or "
        "reason over 4096");
  }
  // Every rank on exactly one node; `node`'s ranks are where this node's
  // candidates may be placed.
  std::vector<bool> seen(static_cast<size_t>(f.size()), false);
  std::vector<bool> here(static_cast<size_t>(f.size()), false);
  int listed = 0;
  for (const kolo::v1::ElasticNode& n : f.nodes()) {
    if (n.node().size() > 256 || n.address().size() > 256) {
      return absl::InvalidArgumentError("rendezvous answer: a node name or address too long");
    }
    for (int r : n.ranks()) {
      if (r < 0 || r >= f.size() || seen[r]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "rendezvous answer: rank ", r, " of a node is out of [0, ", f.size(), ") or repeated"));
      }
      seen[r] = true;
      here[r] = n.node() == node;
      ++listed;
    }
  }
  if (listed != f.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous answer: its nodes hold ", listed, " ranks of ", f.size()));
  }
  std::vector<bool> placed(static_cast<size_t>(f.size()), false);
  for (const kolo::v1::ElasticPlacement& p : f.placements()) {
    if (p.rank() < 0 || p.rank() >= f.size() || placed[p.rank()] || !here[p.rank()] ||
        p.id().size() > 64) {
      return absl::InvalidArgumentError(
          absl::StrCat("rendezvous answer: placement of rank ", p.rank(), " out of [0, ", f.size(),
                       "), repeated, not on node ", node, ", or with a bad id"));
    }
    placed[p.rank()] = true;
  }
  return absl::OkStatus();
}

ElasticLeader::ElasticLeader(std::string job_id, std::string token, ElasticLeaderOptions options)
    : job_id_(std::move(job_id)),
      token_(std::move(token)),
      options_(std::move(options)),
      last_activity_(absl::Now()) {}

bool ElasticLeader::SurvivorLocked(const kolo::v1::ElasticCandidate& c) const {
  return epoch_ > 0 && c.previous_epoch() == epoch_ && c.previous_rank() >= 0;
}

absl::StatusOr<kolo::v1::ElasticFormed> ElasticLeader::Report(
    const kolo::v1::ElasticReport& report) {
  absl::MutexLock l(&mu_);
  absl::Time now = absl::Now();
  last_activity_ = now;
  if (initial_size_ == 0 && report.initial_size() > 0) {
    initial_size_ = report.initial_size();
    min_size_ = std::clamp(report.min_size(), 1, initial_size_);
    max_size_ = report.max_size() > 0 ? std::max(report.max_size(), initial_size_) : 0;
  }
  auto take = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> std::optional<kolo::v1::ElasticFormed> {
    auto it = results_.find(report.node());
    if (it == results_.end() || it->second.epoch() <= report.ended_epoch()) return std::nullopt;
    kolo::v1::ElasticFormed out = std::move(it->second);
    results_.erase(it);
    return out;
  };
  if (auto formed = take()) return *formed;
  if (report.ended_epoch() > epoch_) {
    // A node reports about an epoch this daemon did not form: it is the
    // successor of a lost leader and counts against that epoch's nodes.
    epoch_ = report.ended_epoch();
    nodes_.assign(report.ended_nodes().begin(), report.ended_nodes().end());
    leader_ = report.ended_leader();
    reports_.clear();
    results_.clear();
    refused_ = absl::OkStatus();
    refused_nodes_.clear();
    probed_.clear();
    gone_.clear();
    spdlog::info(
        "elastic job {}: this node takes over as membership leader after epoch {} (its leader "
        "was {})",
        job_id_, epoch_, leader_);
  }
  if (!refused_.ok() && refused_nodes_.count(report.node()) > 0 && report.ended_epoch() == epoch_) {
    return refused_;
  }
  // A node polls with the same report: it keeps the time and order of its
  // first one (a lost node counts from the first report of the change).
  NodeReport next{report, now, now, ++reports_seen_};
  auto prev = reports_.find(report.node());
  if (prev != reports_.end() && prev->second.report.ended_epoch() == report.ended_epoch() &&
      prev->second.report.epoch_ended() == report.epoch_ended()) {
    next.at = prev->second.at;
    next.order = prev->second.order;
  }
  reports_[report.node()] = std::move(next);
  const absl::Time until = now + options_.poll;
  while (true) {
    // This call is the node polling: its report stays fresh while it waits.
    if (auto it = reports_.find(report.node()); it != reports_.end()) it->second.last = now;
    ProbeMissingLocked();
    MaybeFormLocked(now);
    if (auto formed = take()) return *formed;
    if (!refused_.ok() && refused_nodes_.count(report.node()) > 0) return refused_;
    if (now >= until) break;
    cv_.WaitWithTimeout(&mu_, std::min(kTick, until - now));
    now = absl::Now();
  }
  return kolo::v1::ElasticFormed();  // not yet: poll again
}

void ElasticLeader::ProbeMissingLocked() {
  if (!options_.refuses || epoch_ == 0 || !EndReportedLocked()) return;
  // The ended epoch's nodes that have not reported, each asked once per
  // change: a daemon that refuses connections is gone now, and its node
  // need not be waited for.
  std::vector<kolo::v1::ElasticNode> ask;
  for (const kolo::v1::ElasticNode& n : nodes_) {
    if (reports_.count(n.node()) == 0 && probed_.insert(n.node()).second) ask.push_back(n);
  }
  if (ask.empty()) return;
  const uint64_t epoch = epoch_;
  mu_.Unlock();
  std::vector<std::string> refused;
  for (const kolo::v1::ElasticNode& n : ask) {
    if (options_.refuses(n.address())) refused.push_back(n.node());
  }
  mu_.Lock();
  if (epoch_ != epoch) return;  // formed meanwhile
  for (const std::string& node : refused) {
    spdlog::info("elastic job {}: node {} refuses connections: lost, not waited for", job_id_,
                 node);
    gone_.insert(node);
  }
}

void ElasticLeader::RefuseLocked(const absl::Status& why) {
  refused_ = why;
  refused_nodes_.clear();
  for (const auto& [node, r] : reports_) refused_nodes_[node] = true;
  reports_.clear();
  cv_.SignalAll();
  spdlog::warn("{}", why.ToString());
}

bool ElasticLeader::EndReportedLocked() const {
  for (const auto& [node, r] : reports_) {
    if (r.report.epoch_ended() && r.report.ended_epoch() == epoch_) return true;
  }
  return false;
}

void ElasticLeader::MaybeFormLocked(absl::Time now) {
  // A node that stopped polling (its ranks gave up, or its daemon died)
  // has nobody waiting any more.
  for (auto it = reports_.begin(); it != reports_.end();) {
    if (now - it->second.last > kReportFresh) {
      it = reports_.erase(it);
    } else {
      ++it;
    }
  }
  if (reports_.empty()) return;
  int total = 0;
  for (const auto& [node, r] : reports_) total += r.report.candidates_size();
  if (epoch_ == 0) {
    if (initial_size_ > 0 && total >= initial_size_) FormLocked(now, "started");
    return;
  }
  bool ended = false;
  absl::Time first = absl::InfiniteFuture();
  std::string reason;
  for (const auto& [node, r] : reports_) {
    if (r.report.epoch_ended() && r.report.ended_epoch() == epoch_) {
      ended = true;
      if (r.at < first) {
        first = r.at;
        reason = r.report.reason();
      }
    }
  }
  if (!ended) return;  // joiners wait for the running epoch's next reset
  int reported = 0;
  bool leader_in = false;
  std::vector<std::string> lost;
  for (const kolo::v1::ElasticNode& n : nodes_) {
    auto it = reports_.find(n.node());
    if (it != reports_.end() && it->second.report.ended_epoch() == epoch_) {
      ++reported;
      leader_in = leader_in || n.node() == leader_;
    } else {
      lost.push_back(n.node());
    }
  }
  bool all_confirmed = true;
  for (const std::string& node : lost) all_confirmed = all_confirmed && gone_.count(node) > 0;
  if (!all_confirmed && now < first + options_.lost_after) return;
  const int n = static_cast<int>(nodes_.size());
  if (!(2 * reported > n || (2 * reported == n && leader_in))) {
    RefuseLocked(absl::FailedPreconditionError(absl::StrCat(
        "elastic job ", job_id_, ": epoch ", epoch_, " ended and only ", reported, " of its ", n,
        " nodes are left here (lost: ", absl::StrJoin(lost, ", "),
        "); a new epoch needs a strict majority of them, or exactly half including its leader (",
        leader_, "), so that a partitioned job can never go on as two")));
    return;
  }
  bool survivor = false;
  for (const auto& [node, r] : reports_) {
    for (const kolo::v1::ElasticCandidate& c : r.report.candidates()) {
      survivor = survivor || SurvivorLocked(c);
    }
  }
  if (!survivor) {
    // As on one node: the job's state went with its ranks.
    RefuseLocked(absl::FailedPreconditionError(
        absl::StrCat("elastic job ", job_id_, " has no rank left of epoch ", epoch_,
                     " (they finished or died; its state went with them): joiners cannot "
                     "carry it on")));
    return;
  }
  if (total < min_size_) return;  // waits for joiners, up to each rank's deadline
  if (!lost.empty()) {
    reason = absl::StrCat(reason.empty() ? "" : absl::StrCat(reason, "; "), "node(s) ",
                          absl::StrJoin(lost, ", "), " lost");
  }
  FormLocked(now, reason.empty() ? "ranks reset" : reason);
}

void ElasticLeader::FormLocked(absl::Time now, const std::string& reason) {
  struct Seat {
    const kolo::v1::ElasticCandidate* candidate;
    const NodeReport* from;
    std::tuple<int, int64_t, uint64_t, uint64_t> key;
  };
  std::vector<Seat> seats;
  for (const auto& [node, r] : reports_) {
    for (const kolo::v1::ElasticCandidate& c : r.report.candidates()) {
      std::tuple<int, int64_t, uint64_t, uint64_t> key;
      if (SurvivorLocked(c)) {
        key = {0, c.previous_rank(), 0, 0};
      } else if (epoch_ == 0 && !c.joiner()) {
        key = {1, c.hint_rank(), r.order, c.arrival()};
      } else {
        key = {2, 0, r.order, c.arrival()};
      }
      seats.push_back(Seat{&c, &r, key});
    }
  }
  std::stable_sort(seats.begin(), seats.end(),
                   [](const Seat& a, const Seat& b) { return a.key < b.key; });
  int size = static_cast<int>(seats.size());
  if (max_size_ > 0) size = std::min(size, max_size_);
  const uint64_t epoch = epoch_ + 1;
  std::map<std::string, std::vector<int>> ranks_of;
  std::map<std::string, std::string> address_of;
  std::map<std::string, kolo::v1::ElasticFormed> results;
  for (const auto& [node, r] : reports_) {
    address_of[node] = r.report.address();
    results[node];
  }
  for (int rank = 0; rank < size; ++rank) {
    const std::string& node = seats[rank].from->report.node();
    ranks_of[node].push_back(rank);
    auto* p = results[node].add_placements();
    p->set_id(seats[rank].candidate->id());
    p->set_rank(rank);
  }
  std::vector<kolo::v1::ElasticNode> nodes;
  for (const auto& [node, ranks] : ranks_of) {
    kolo::v1::ElasticNode n;
    n.set_node(node);
    n.set_address(address_of[node]);
    for (int r : ranks) n.add_ranks(r);
    nodes.push_back(std::move(n));
  }
  std::sort(nodes.begin(), nodes.end(),
            [](const kolo::v1::ElasticNode& a, const kolo::v1::ElasticNode& b) {
              return a.ranks(0) < b.ranks(0);
            });
  const std::string leader = nodes.empty() ? std::string() : nodes.front().node();
  const std::string coordinator = nodes.empty() ? std::string() : nodes.front().address();
  for (auto& [node, formed] : results) {
    formed.set_epoch(epoch);
    formed.set_size(size);
    for (const kolo::v1::ElasticNode& n : nodes) *formed.add_nodes() = n;
    formed.set_coordinator(coordinator);
    formed.set_leader(leader);
    formed.set_reason(reason);
  }
  spdlog::info("elastic job {}: epoch {} formed with {} rank(s) on {} node(s), led by {} ({})",
               job_id_, epoch, size, nodes.size(), leader, reason);
  results_ = std::move(results);
  epoch_ = epoch;
  nodes_ = std::move(nodes);
  leader_ = leader;
  reports_.clear();
  refused_ = absl::OkStatus();
  refused_nodes_.clear();
  probed_.clear();
  gone_.clear();
  last_activity_ = now;
  cv_.SignalAll();
}

bool ElasticLeader::Idle(absl::Time now) const {
  absl::MutexLock l(&mu_);
  return reports_.empty() && now - last_activity_ > kIdleAfter;
}

int ElasticLeader::JoinersWaiting(absl::Time now, const std::string& here) const {
  absl::MutexLock l(&mu_);
  int joiners = 0;
  for (const auto& [node, r] : reports_) {
    // This node's own joiners its group counts; a node that stopped
    // polling has no joiners waiting any more.
    if (node == here || now - r.last > kReportFresh) continue;
    for (const kolo::v1::ElasticCandidate& c : r.report.candidates()) joiners += c.joiner() ? 1 : 0;
  }
  return joiners;
}

uint64_t ExpectedElasticJobs::Add(const std::string& job_id, const std::string& token) {
  absl::MutexLock l(&mu_);
  const uint64_t serial = next_++;
  jobs_[job_id].push_back(Entry{serial, token});
  return serial;
}

void ExpectedElasticJobs::Remove(const std::string& job_id, uint64_t serial) {
  absl::MutexLock l(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  std::vector<Entry>& list = it->second;
  list.erase(std::remove_if(list.begin(), list.end(),
                            [serial](const Entry& e) { return e.serial == serial; }),
             list.end());
  if (list.empty()) jobs_.erase(it);
}

bool ExpectedElasticJobs::Has(const std::string& job_id, const std::string& token) const {
  absl::MutexLock l(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return false;
  for (const Entry& e : it->second) {
    if (SecretsEqual(e.token, token)) return true;
  }
  return false;
}

std::shared_ptr<ElasticLeaders::Expected> ElasticLeaders::Expect(const std::string& job_id,
                                                                 const std::string& token) {
  return std::make_shared<Expected>(expected_, job_id, expected_->Add(job_id, token));
}

std::shared_ptr<ElasticLeader> ElasticLeaders::FindLocked(const std::string& job_id,
                                                          const std::string& token) const {
  auto it = leaders_.find(job_id);
  if (it == leaders_.end()) return nullptr;
  for (const auto& x : it->second) {
    if (SecretsEqual(x->token(), token)) return x;
  }
  return nullptr;
}

bool ElasticLeaders::Knows(const std::string& job_id, const std::string& token) {
  if (expected_->Has(job_id, token)) return true;
  absl::MutexLock l(&mu_);
  return FindLocked(job_id, token) != nullptr;
}

int ElasticLeaders::JoinersWaiting(const std::string& job_id, const std::string& token,
                                   const std::string& here) {
  absl::MutexLock l(&mu_);
  std::shared_ptr<ElasticLeader> leader = FindLocked(job_id, token);
  return leader == nullptr ? 0 : leader->JoinersWaiting(absl::Now(), here);
}

absl::StatusOr<kolo::v1::ElasticFormed> ElasticLeaders::Report(
    const kolo::v1::ElasticReport& report) {
  std::shared_ptr<ElasticLeader> leader;
  {
    absl::MutexLock l(&mu_);
    if (absl::Status s = ValidateElasticReport(report, options_.max_candidates); !s.ok()) {
      return s;
    }
    const absl::Time now = absl::Now();
    int jobs = 0;
    for (auto it = leaders_.begin(); it != leaders_.end();) {
      auto& list = it->second;
      list.erase(
          std::remove_if(list.begin(), list.end(),
                         [&](const std::shared_ptr<ElasticLeader>& x) { return x->Idle(now); }),
          list.end());
      jobs += static_cast<int>(list.size());
      if (list.empty()) {
        leaders_.erase(it++);
      } else {
        ++it;
      }
    }
    leader = FindLocked(report.job_id(), report.job_token());
    if (leader == nullptr) {
      if (jobs >= options_.max_jobs) {
        return absl::ResourceExhaustedError(
            absl::StrCat("rendezvous: this kolod leads ", jobs, " elastic jobs, its limit"));
      }
      leader = std::make_shared<ElasticLeader>(report.job_id(), report.job_token(), options_);
      leaders_[report.job_id()].push_back(leader);
    }
  }
  return leader->Report(report);
}

}  // namespace kolo::daemon
