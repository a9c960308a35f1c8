#include "daemon/observe/flight_recorder.h"

#include <utility>

namespace kolo::daemon {

void FlightRecorder::Record(CollectiveRecord record) {
  record.sequence = next_sequence_++;
  records_.push_back(std::move(record));
  while (records_.size() > max_records_) records_.pop_front();
}

void FlightRecorder::Error(std::string message) {
  errors_.push_back(std::move(message));
  while (errors_.size() > max_errors_) errors_.pop_front();
}

}  // namespace kolo::daemon
