#include "client/kolorun/elastic_controller.h"

#include <algorithm>
#include <utility>

namespace kolo::kolorun {

ElasticController::ElasticController(const ElasticOptions& options, std::vector<HostSlots> hosts)
    : options_(options), hosts_(std::move(hosts)) {}

std::vector<int> ElasticController::SetHosts(std::vector<HostSlots> hosts) {
  hosts_ = std::move(hosts);
  std::vector<int> leaving;
  for (auto it = live_.begin(); it != live_.end();) {
    if (Listed(it->second)) {
      ++it;
      continue;
    }
    leaving.push_back(it->first);
    stopping_.insert(it->first);
    it = live_.erase(it);
  }
  std::erase_if(pending_, [this](const PendingRestart& p) { return !Listed(p.host); });
  return leaving;
}

void ElasticController::OnStarted(int serial, const std::string& host, bool joiner) {
  live_[serial] = host;
  if (joiner) joiners_.insert(serial);
}

ElasticController::Verdict ElasticController::OnExited(int serial, const ExitStatus& status,
                                                       Clock::time_point now) {
  Verdict verdict;
  if (stopping_.erase(serial) > 0) {
    verdict.kind = Verdict::Kind::kStopped;
    return verdict;
  }
  const auto it = live_.find(serial);
  if (it != live_.end()) {
    verdict.host = it->second;
    live_.erase(it);
  }
  if (status.success()) {
    verdict.kind = Verdict::Kind::kSucceeded;
    verdict.first_success = !finishing_ && !stopped_;
    finishing_ = true;
    pending_.clear();
    return verdict;
  }
  if (finishing_ && joiners_.count(serial) > 0) {
    // Started before the others finished, it found no epoch to join (kolod
    // refuses a joiner once the ranks it would join have all left).
    verdict.kind = Verdict::Kind::kLateJoiner;
    return verdict;
  }
  if (!growing()) {
    verdict.kind = Verdict::Kind::kEnding;
    return verdict;
  }
  return RecordFailure(verdict.host, now);
}

ElasticController::Verdict ElasticController::OnStartFailed(const std::string& host,
                                                            Clock::time_point now) {
  if (!growing()) return Verdict{.kind = Verdict::Kind::kEnding, .host = host};
  return RecordFailure(host, now);
}

ElasticController::Verdict ElasticController::RecordFailure(const std::string& host,
                                                            Clock::time_point now) {
  HostRecord& record = records_[host];
  ++record.failures;
  Verdict verdict{.host = host, .host_failures = record.failures};
  if (record.blocklisted || !Listed(host)) {
    verdict.kind = Verdict::Kind::kNotRestarted;
  } else if (record.failures >= options_.max_failures_per_host) {
    record.blocklisted = true;
    std::erase_if(pending_, [&host](const PendingRestart& p) { return p.host == host; });
    verdict.kind = Verdict::Kind::kBlocklisted;
  } else {
    verdict.kind = Verdict::Kind::kRestart;
    verdict.restart_at = now + Backoff(record.failures);
    pending_.push_back({.host = host, .due = verdict.restart_at});
  }
  return verdict;
}

Clock::duration ElasticController::Backoff(int failures) const {
  absl::Duration backoff = options_.restart_backoff;
  for (int i = 1; i < failures && backoff < options_.max_restart_backoff; ++i) backoff *= 2;
  return ToClock(std::min(backoff, options_.max_restart_backoff));
}

std::vector<std::string> ElasticController::TakeDueStarts(Clock::time_point now) {
  std::vector<std::string> starts;
  if (!growing()) return starts;
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->due > now) {
      ++it;
      continue;
    }
    if (Usable(it->host)) starts.push_back(it->host);
    it = pending_.erase(it);
  }

  int target = 0;
  for (const HostSlots& h : hosts_) {
    if (!blocklisted(h.host)) target += h.slots;
  }
  if (options_.max_ranks > 0) target = std::min(target, options_.max_ranks);
  int committed = Committed() + static_cast<int>(starts.size());
  for (const HostSlots& h : hosts_) {
    if (committed >= target) break;
    if (blocklisted(h.host)) continue;
    int used = 0;
    for (const auto& [serial, host] : live_) used += host == h.host;
    for (const PendingRestart& p : pending_) used += p.host == h.host;
    used += static_cast<int>(std::count(starts.begin(), starts.end(), h.host));
    for (; used < h.slots && committed < target; ++used, ++committed) starts.push_back(h.host);
  }
  return starts;
}

std::optional<int> ElasticController::CheckMinimum(Clock::time_point now) {
  if (!growing() || Committed() >= options_.min_ranks) {
    below_minimum_since_.reset();
    return std::nullopt;
  }
  if (!options_.discovery_script.empty()) {
    if (!below_minimum_since_.has_value()) below_minimum_since_ = now;
    if (now - *below_minimum_since_ < ToClock(options_.elastic_timeout)) return std::nullopt;
  }
  return Committed();
}

void ElasticController::Stop() {
  stopped_ = true;
  pending_.clear();
}

bool ElasticController::blocklisted(const std::string& host) const {
  const auto it = records_.find(host);
  return it != records_.end() && it->second.blocklisted;
}

bool ElasticController::Listed(const std::string& host) const {
  return std::any_of(hosts_.begin(), hosts_.end(),
                     [&host](const HostSlots& h) { return h.host == host; });
}

}  // namespace kolo::kolorun
