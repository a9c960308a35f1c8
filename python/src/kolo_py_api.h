/* The table of functions the kolo Python extension hands to the TensorFlow op
 * library, so both share the process's one Client without sharing any C++
 * type or library: the op library is built against TensorFlow's bundled
 * Abseil and protobuf, libkolo against the system's, and only plain C types
 * cross this boundary. Versioned: a new field means a new struct version.
 *
 * Every function returning int returns a status code (the values of
 * absl::StatusCode, 0 for OK) and on failure writes the error's message,
 * NUL-terminated and truncated to `err_len`, into `err`. All functions are
 * safe to call from several threads. */
#ifndef KOLO_PYTHON_SRC_KOLO_PY_API_H_
#define KOLO_PYTHON_SRC_KOLO_PY_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KOLO_PY_API_VERSION 4

/* Called by wait_output with the result's shape (and, for alltoall, the rows
 * received from each rank); returns where to copy the result's bytes, or NULL
 * to fail the call with INTERNAL. */
typedef void* (*kolo_output_sink)(void* ctx, const int64_t* shape, int ndim, const int64_t* splits,
                                  int nsplits);

/* Grows by appending fields; KOLO_PY_API_VERSION says which it has. */
typedef struct KoloPyApi {
  uint32_t version;     /* KOLO_PY_API_VERSION */
  uint32_t struct_size; /* sizeof(KoloPyApi) */

  /* 1 while kolo.init() has attached this process (and shutdown has not). */
  int (*initialized)(void);
  int (*rank)(void);
  int (*size)(void);

  int (*allreduce_async)(const void* input, void* output, int dtype, const int64_t* shape, int ndim,
                         const char* name, int op, double prescale, double postscale,
                         int compression, int process_set, uint64_t* handle, char* err,
                         size_t err_len);
  /* `n` tensors negotiated as one group; handles[i] is tensor i's handle. */
  int (*grouped_allreduce_async)(int n, const void* const* inputs, void* const* outputs,
                                 const int* dtypes, const int64_t* const* shapes, const int* ndims,
                                 const char* const* names, int op, double prescale,
                                 double postscale, int compression, int process_set,
                                 uint64_t* handles, char* err, size_t err_len);
  int (*broadcast_async)(void* tensor, int dtype, const int64_t* shape, int ndim, const char* name,
                         int root_rank, int process_set, uint64_t* handle, char* err,
                         size_t err_len);
  int (*allgather_async)(const void* input, int dtype, const int64_t* shape, int ndim,
                         const char* name, int process_set, uint64_t* handle, char* err,
                         size_t err_len);
  int (*reducescatter_async)(const void* input, int dtype, const int64_t* shape, int ndim,
                             const char* name, int op, double prescale, double postscale,
                             int process_set, uint64_t* handle, char* err, size_t err_len);
  int (*alltoall_async)(const void* input, int dtype, const int64_t* shape, int ndim,
                        const int64_t* splits, int nsplits, const char* name, int process_set,
                        uint64_t* handle, char* err, size_t err_len);

  /* Blocks until the collective completes; consumes the handle. */
  int (*wait)(uint64_t handle, char* err, size_t err_len);
  /* For allgather, reducescatter (alltoall = 0) and alltoall (alltoall = 1)
   * handles: waits, asks `sink` where to put the result and copies it there. */
  int (*wait_output)(uint64_t handle, int alltoall, kolo_output_sink sink, void* sink_ctx,
                     char* err, size_t err_len);

  int (*barrier)(int process_set, char* err, size_t err_len);
  int (*join)(int* last_rank, char* err, size_t err_len);

  /* Version 2. */
  /* `n` tensors gathered, or reduced and scattered, as one negotiated and
   * fused group; handles[i] is tensor i's handle (wait_output). */
  int (*grouped_allgather_async)(int n, const void* const* inputs, const int* dtypes,
                                 const int64_t* const* shapes, const int* ndims,
                                 const char* const* names, int process_set, uint64_t* handles,
                                 char* err, size_t err_len);
  int (*grouped_reducescatter_async)(int n, const void* const* inputs, const int* dtypes,
                                     const int64_t* const* shapes, const int* ndims,
                                     const char* const* names, int op, double prescale,
                                     double postscale, int process_set, uint64_t* handles,
                                     char* err, size_t err_len);
  /* This rank will not take part in collective `kind` (kolo::CollectiveKind)
   * named `name`: a check of the caller's own failed with `message`. The
   * other ranks' collective of that name fails with it instead of waiting
   * (kolo::Client::Refuse). */
  int (*refuse)(int kind, const char* name, int process_set, const char* message, char* err,
                size_t err_len);
  /* Version 3. */
  /* Waits at most `timeout_us` for the collective to complete; *ready is 1
   * once it has (wait or wait_output then return at once), else 0. The
   * handle stays valid either way. */
  int (*test_for)(uint64_t handle, int64_t timeout_us, int* ready, char* err, size_t err_len);
  /* Version 4. */
  /* *underway is 1 once every rank has submitted the collective, so it
   * completes without another call of this rank's (kolo::Client::Underway),
   * else 0. The handle stays valid. */
  int (*underway)(uint64_t handle, int* underway, char* err, size_t err_len);
} KoloPyApi;

#ifdef __cplusplus
}
#endif

#endif /* KOLO_PYTHON_SRC_KOLO_PY_API_H_ */
