// The human-readable views of kolo.v1.Status responses that koloctl prints:
// pure functions from a response to text.
//
// Thread-safety: thread-safe (no state).
#pragma once

#include <string>

#include "proto/kolo/v1/status.pb.h"

namespace kolo::koloctl {

// Node facts, then one line per job.
std::string RenderStatus(const kolo::v1::GetStatusResponse& response);

// One table row per job: job, size, state, ranks attached, responses, bytes,
// throughput, pending tensors.
std::string RenderJobs(const kolo::v1::GetStatusResponse& response);

// One job: summary, ranks, pending tensors, stalls, recent collectives and
// errors.
std::string RenderJob(const kolo::v1::JobDetail& detail);

// One line per stall (its `message`), then a table of every stall.
std::string RenderStalls(const kolo::v1::ListStallsResponse& response);

// The one-line description of a stall: its `message` when the daemon set
// one, else one composed from its fields.
std::string StallLine(const kolo::v1::Stall& stall);

}  // namespace kolo::koloctl
