// The job token a rank uses when KOLO_JOB_TOKEN is not set.
//
// kolod wants a token of at least 128 bits, shared by every rank of a job.
// kolorun makes one per job. A rank started some other way (mpirun, srun,
// a script) without KOLO_JOB_TOKEN:
// - alone (size 1) makes a fresh random one: nobody else needs it;
// - otherwise reads the user's token file, $KOLO_JOB_TOKEN_FILE or
//   ~/.kolo/job_token, creating it (mode 0600, atomically, so ranks starting
//   together agree) when it does not exist. On a cluster whose home
//   directories are shared, every node then reads the same token.
//
// Thread-safety: free functions.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace kolo {

// Reads the token in `path`, or creates the file with a fresh token. The
// file must belong to this user and be readable by nobody else.
absl::StatusOr<std::string> LoadOrCreateJobToken(const std::string& path);

// The token file's path from the environment, or "" when neither
// KOLO_JOB_TOKEN_FILE nor HOME is set.
std::string DefaultJobTokenFile();

}  // namespace kolo
