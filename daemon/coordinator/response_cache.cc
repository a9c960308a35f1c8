#include "daemon/coordinator/response_cache.h"

#include <algorithm>

namespace kolo::daemon {

std::optional<uint32_t> ResponseCache::Find(const std::string& key) const {
  auto it = ids_.find(key);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

std::optional<uint32_t> ResponseCache::Assign(const std::string& key,
                                              const kolo::v1::TensorMeta& meta, int nodes,
                                              int expected) {
  if (keys_.size() >= capacity_ || ids_.contains(key)) return std::nullopt;
  const uint32_t id = static_cast<uint32_t>(keys_.size());
  ids_[key] = id;
  keys_.push_back(key);
  metas_.push_back(meta);
  // A cache bit stands for the metadata, not for the first node's
  // circumstances.
  metas_.back().clear_joined();
  metas_.back().clear_local_error();
  rounds_.push_back(Round{std::vector<uint8_t>(nodes, 0), 0, expected, meta.process_set()});
  return id;
}

bool ResponseCache::Count(uint32_t id, int node) {
  Round& c = rounds_[id];
  if (c.reported[node] != 0) return false;
  c.reported[node] = 1;
  if (c.count++ == 0) ++counted_;
  if (c.count < c.expected) return false;
  std::fill(c.reported.begin(), c.reported.end(), 0);
  c.count = 0;
  --counted_;
  return true;
}

std::vector<int> ResponseCache::Spill(uint32_t id) {
  Round& c = rounds_[id];
  std::vector<int> nodes;
  if (c.count == 0) return nodes;
  for (size_t n = 0; n < c.reported.size(); ++n) {
    if (c.reported[n] != 0) nodes.push_back(static_cast<int>(n));
  }
  std::fill(c.reported.begin(), c.reported.end(), 0);
  c.count = 0;
  --counted_;
  return nodes;
}

}  // namespace kolo::daemon
