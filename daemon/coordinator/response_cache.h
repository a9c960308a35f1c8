// The coordinator's response cache: a name planned once gets a cache id,
// and from then on each node reports it as one bit. A bit stands for the
// name's agreed metadata, so the coordinator only counts the nodes of a
// round (no metadata to compare): at 1,024 nodes a warm step is 165,000
// bits, which the general path could not take within a millisecond.
//
// Thread-safety: not thread-safe; the coordinator's lock guards it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "proto/kolo/v1/peer.pb.h"

namespace kolo::daemon {

class ResponseCache {
 public:
  explicit ResponseCache(uint32_t capacity) : capacity_(capacity) {}

  // Names cached so far; ids are 0 .. size() - 1.
  size_t size() const { return keys_.size(); }
  std::optional<uint32_t> Find(const std::string& key) const;
  // Gives the agreed `meta` (its key `key`) the next id; a round of it is
  // complete once `expected` of the job's `nodes` nodes reported it.
  // Nothing when the cache is full.
  std::optional<uint32_t> Assign(const std::string& key, const kolo::v1::TensorMeta& meta,
                                 int nodes, int expected);
  const std::string& key(uint32_t id) const { return keys_[id]; }
  // The metadata the bit stands for (without the first node's joined
  // count or local error).
  const kolo::v1::TensorMeta& meta(uint32_t id) const { return metas_[id]; }
  int process_set(uint32_t id) const { return rounds_[id].process_set; }

  // Node `node` reported `id` by its bit. True once every node expected
  // has (the round then starts over); a node's second bit in one round
  // counts nothing.
  bool Count(uint32_t id, int node);
  // Whether some round has a count (a full report of its name, or a join,
  // must move it to the general path first).
  bool any_counted() const { return counted_ > 0; }
  // Ends `id`'s round; returns the nodes that had reported it.
  std::vector<int> Spill(uint32_t id);

 private:
  struct Round {
    std::vector<uint8_t> reported;  // by node index
    int count = 0;
    int expected = 0;  // nodes of its process set
    int process_set = 0;
  };

  const uint32_t capacity_;
  absl::flat_hash_map<std::string, uint32_t> ids_;
  std::vector<std::string> keys_;
  std::vector<kolo::v1::TensorMeta> metas_;
  std::vector<Round> rounds_;  // by cache id
  int counted_ = 0;            // rounds with count > 0
};

}  // namespace kolo::daemon
