// The job's settings from the environment: Kolo's KOLO_* variables and
// Horovod's HOROVOD_* ones, each mapped to ClientOptions::job, noted as
// changing nothing here (ClientOptions::env_notes, with why), or refused
// with an error naming the variable. A KOLO_* variable wins over its
// HOROVOD_* twin. docs/horovod_env.md is the table of them all.
//
// Thread-safety: reads the process environment; call before threads that
// change it.
#pragma once

#include "absl/status/status.h"
#include "kolo/kolo.h"

namespace kolo {

// Fills `o->job` and `o->env_notes`; INVALID_ARGUMENT for a value that is
// not one the variable takes.
absl::Status ApplyJobEnvironment(ClientOptions* o);

}  // namespace kolo
