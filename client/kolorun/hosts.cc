#include "client/kolorun/hosts.h"

#include <cstdint>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace kolo::kolorun {
namespace {

// Far more than any job; it keeps the slot total within an int.
constexpr int kMaxSlotsPerHost = 1 << 20;

absl::StatusOr<int> ParseSlots(absl::string_view context, absl::string_view entry,
                               absl::string_view text) {
  int slots = 0;
  if (!absl::SimpleAtoi(text, &slots) || slots < 1 || slots > kMaxSlotsPerHost) {
    return absl::InvalidArgumentError(absl::StrCat(context, " \"", entry, "\": slots \"", text,
                                                   "\" must be a whole number from 1 to ",
                                                   kMaxSlotsPerHost));
  }
  return slots;
}

// The machine part of an ssh destination: "user@host" -> "host".
absl::string_view MachinePart(absl::string_view host) {
  const size_t at = host.rfind('@');
  return at == absl::string_view::npos ? host : host.substr(at + 1);
}

bool IsLoopbackName(absl::string_view host) {
  return absl::EqualsIgnoreCase(host, "localhost") || host == "127.0.0.1" || host == "::1";
}

}  // namespace

absl::StatusOr<HostSlots> ParseHostEntry(absl::string_view entry, absl::string_view context) {
  HostSlots out;
  absl::string_view host = entry;
  absl::string_view slots;
  bool has_slots = false;
  if (absl::StartsWith(entry, "[")) {
    const size_t close = entry.find(']');
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(context, " \"", entry, "\": no ] after ["));
    }
    host = entry.substr(1, close - 1);
    absl::string_view rest = entry.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') {
        return absl::InvalidArgumentError(
            absl::StrCat(context, " \"", entry, "\": expected :SLOTS after ]"));
      }
      slots = rest.substr(1);
      has_slots = true;
    }
  } else if (const size_t colon = entry.rfind(':');
             colon != absl::string_view::npos && entry.find(':') == colon) {
    // Exactly one colon: HOST:SLOTS. (More: a bare IPv6 literal.)
    host = entry.substr(0, colon);
    slots = entry.substr(colon + 1);
    has_slots = true;
  }
  if (host.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(context, " \"", entry, "\": empty host name"));
  }
  if (host[0] == '-') {
    return absl::InvalidArgumentError(
        absl::StrCat(context, " \"", entry, "\": a host name must not start with '-'"));
  }
  if (absl::StrContains(host, ',')) {
    // A comma separates -H entries; in one entry it is a typo.
    return absl::InvalidArgumentError(
        absl::StrCat(context, " \"", entry, "\": a host name must not contain ','"));
  }
  for (char c : host) {
    if (absl::ascii_isspace(static_cast<unsigned char>(c)) ||
        absl::ascii_iscntrl(static_cast<unsigned char>(c))) {
      return absl::InvalidArgumentError(absl::StrCat(context, " \"", entry,
                                                     "\": a host name must not contain spaces or "
                                                     "control characters"));
    }
  }
  out.host = std::string(host);
  if (has_slots) {
    absl::StatusOr<int> n = ParseSlots(context, entry, slots);
    if (!n.ok()) return n.status();
    out.slots = *n;
  }
  return out;
}

absl::StatusOr<std::vector<HostSlots>> ParseHostList(const std::string& spec) {
  if (absl::StripAsciiWhitespace(spec).empty()) {
    return absl::InvalidArgumentError("-H: the host list is empty");
  }
  std::vector<HostSlots> hosts;
  std::set<std::string> seen;
  for (absl::string_view entry : absl::StrSplit(spec, ',')) {
    if (entry.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("-H \"", spec, "\": empty entry"));
    }
    absl::StatusOr<HostSlots> parsed = ParseHostEntry(entry, "-H entry");
    if (!parsed.ok()) return parsed.status();
    if (!seen.insert(absl::AsciiStrToLower(parsed->host)).second) {
      return absl::InvalidArgumentError(absl::StrCat("-H: host ", parsed->host,
                                                     " is listed twice; give it once with "
                                                     "all its slots"));
    }
    hosts.push_back(*std::move(parsed));
  }
  return hosts;
}

bool IsThisMachine(const std::string& host, const std::string& this_host) {
  if (absl::StrContains(host, '@')) return false;
  if (IsLoopbackName(host)) return true;
  if (this_host.empty()) return false;
  if (absl::EqualsIgnoreCase(host, this_host)) return true;
  const absl::string_view short_name = absl::string_view(this_host).substr(0, this_host.find('.'));
  return absl::EqualsIgnoreCase(host, short_name);
}

absl::StatusOr<std::vector<RankPlacement>> AssignRanks(const std::vector<HostSlots>& hosts,
                                                       int num_ranks,
                                                       const std::string& this_host) {
  std::vector<RankPlacement> out;
  if (hosts.empty()) {
    for (int r = 0; r < num_ranks; ++r) {
      out.push_back({.host = "", .local = true, .local_rank = r, .local_size = num_ranks});
    }
    return out;
  }
  int64_t total = 0;
  const HostSlots* local_entry = nullptr;
  for (const HostSlots& h : hosts) {
    total += h.slots;
    if (!IsThisMachine(h.host, this_host)) continue;
    if (local_entry != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("-H: ", local_entry->host, " and ", h.host,
                       " are both this machine; give it once with all its slots"));
    }
    local_entry = &h;
  }
  if (num_ranks > total) {
    return absl::InvalidArgumentError(
        absl::StrCat("-np ", num_ranks, " is more than the ", total, " slots of the -H host list"));
  }
  for (const HostSlots& h : hosts) {
    const int here = std::min<int>(h.slots, num_ranks - static_cast<int>(out.size()));
    const bool local = IsThisMachine(h.host, this_host);
    for (int l = 0; l < here; ++l) {
      out.push_back({.host = h.host, .local = local, .local_rank = l, .local_size = here});
    }
  }
  return out;
}

int HostsUsed(const std::vector<RankPlacement>& placements) {
  std::set<std::string> hosts;
  for (const RankPlacement& p : placements) hosts.insert(p.host);
  return static_cast<int>(hosts.size());
}

absl::StatusOr<std::string> CoordinatorAddress(const RankPlacement& rank0,
                                               const std::string& this_host, int peer_port) {
  absl::string_view machine = MachinePart(rank0.host);
  if (rank0.local && IsLoopbackName(machine)) {
    if (this_host.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("rank 0 runs on ", rank0.host,
                       ", a name the other hosts cannot "
                       "reach, and this machine's hostname is unknown; pass --coordinator "
                       "HOST:PORT"));
    }
    machine = this_host;
  }
  if (absl::StrContains(machine, ':')) {
    return absl::StrCat("[", machine, "]:", peer_port);
  }
  return absl::StrCat(machine, ":", peer_port);
}

}  // namespace kolo::kolorun
