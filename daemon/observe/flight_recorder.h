// FlightRecorder: the last collectives of one job and its last errors, kept
// in bounded rings so an operator can see what a job did just before it hung
// or failed.
//
// Thread-safety: not thread-safe; owned by its Job, which serialises access.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "proto/kolo/abi/types.h"

namespace kolo::daemon {

struct CollectiveRecord {
  uint64_t sequence = 0;
  CollectiveKind kind = CollectiveKind::kAllreduce;
  std::string name;
  DType dtype = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  uint64_t bytes = 0;
  bool failed = false;
  std::string error;
  absl::Time first_submitted;
  absl::Time ready_at;
  absl::Duration execute;
  int fused_with = 0;  // other tensors in its response
};

class FlightRecorder {
 public:
  FlightRecorder(size_t max_records, size_t max_errors)
      : max_records_(max_records), max_errors_(max_errors) {}

  // Assigns the record its sequence number.
  void Record(CollectiveRecord record);
  void Error(std::string message);

  const std::deque<CollectiveRecord>& records() const { return records_; }
  const std::deque<std::string>& errors() const { return errors_; }

 private:
  size_t max_records_;
  size_t max_errors_;
  uint64_t next_sequence_ = 1;
  std::deque<CollectiveRecord> records_;
  std::deque<std::string> errors_;
};

}  // namespace kolo::daemon
