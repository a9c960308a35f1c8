// The kolo Python extension's one Client per process, shared by the Python API
// and (through the KoloPyApi table) the TensorFlow op library.
//
// A Python extension module is process-wide state by nature: init() attaches
// the process as one rank, and every later call of either layer must use that
// same attachment, so this is the one place that holds it.
//
// Thread-safety: every function is safe to call from several threads. A
// caller keeps the shared_ptr from Get() for the length of its call, so a
// concurrent Shutdown() detaches only once those calls are done.
#pragma once

#include <memory>

#include "absl/status/status.h"
#include "kolo/kolo.h"
#include "python/src/kolo_py_api.h"

namespace kolo::python {

// Attaches with ClientOptions::FromEnv(); OK (doing nothing) when attached.
absl::Status InitProcessClient();
// Detaches; pending collectives fail with CANCELLED. Idempotent.
void ShutdownProcessClient();
// Elastic jobs: ends this process's session and attaches for the job's next
// membership epoch (Client::Reset); calls in flight on the old session fail.
absl::Status ResetProcessClient();
// The attached Client, or FAILED_PRECONDITION naming init().
absl::StatusOr<std::shared_ptr<Client>> GetProcessClient();

// Converts the ABI's integer codes; INVALID_ARGUMENT for a value out of range.
absl::StatusOr<DType> ToDType(int code);
absl::StatusOr<ReduceOp> ToReduceOp(int code);
absl::StatusOr<Compression> ToCompression(int code);

// The table handed to the TensorFlow op library (static storage).
const KoloPyApi* PyApiTable();

}  // namespace kolo::python
