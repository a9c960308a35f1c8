/* libkolo's C ABI. Every function returns a kolo_status (0 on success, else a
 * code with the values of absl::StatusCode); kolo_last_error() returns the
 * message of the calling thread's last failed call. A kolo_client is safe to
 * use from several threads. */
#ifndef KOLO_C_API_H_
#define KOLO_C_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int kolo_status;
typedef struct kolo_client kolo_client;
typedef uint64_t kolo_handle;

enum kolo_dtype {
  KOLO_UINT8 = 0,
  KOLO_INT8 = 1,
  KOLO_INT32 = 2,
  KOLO_INT64 = 3,
  KOLO_FLOAT16 = 4,
  KOLO_BFLOAT16 = 5,
  KOLO_FLOAT32 = 6,
  KOLO_FLOAT64 = 7,
  KOLO_INT16 = 8,
  /* One byte per element, true when it is not zero. Reductions write 0 or
   * 1: sum and max are a logical or, product and min a logical and; average
   * and scale factors other than 1 are refused. */
  KOLO_BOOL = 9,
  KOLO_UINT16 = 10,
};

enum kolo_reduce_op {
  KOLO_SUM = 0,
  KOLO_AVERAGE = 1,
  KOLO_MIN = 2,
  KOLO_MAX = 3,
  KOLO_PRODUCT = 4,
};

enum kolo_compression {
  KOLO_COMPRESSION_NONE = 0,
  KOLO_COMPRESSION_FP16 = 1,
  KOLO_COMPRESSION_BF16 = 2,
};

/* Options of allreduce and reducescatter; kolo_allreduce_options_init fills
 * the defaults (sum, no scaling, no compression, every rank). */
typedef struct kolo_allreduce_options {
  int op;
  double prescale;
  double postscale;
  int compression;
  int process_set;
} kolo_allreduce_options;
void kolo_allreduce_options_init(kolo_allreduce_options* options);

/* A tensor kolod produced (allgather, reducescatter, alltoall), in the
 * session's shared memory until kolo_tensor_free. */
typedef struct kolo_tensor kolo_tensor;
const void* kolo_tensor_data(const kolo_tensor* t);
size_t kolo_tensor_bytes(const kolo_tensor* t);
int kolo_tensor_ndim(const kolo_tensor* t);
const int64_t* kolo_tensor_shape(const kolo_tensor* t);
/* Alltoall only: rows received from each rank of the process set. */
int kolo_tensor_num_splits(const kolo_tensor* t);
const int64_t* kolo_tensor_received_splits(const kolo_tensor* t);
void kolo_tensor_free(kolo_tensor* t);

/* Attaches using the KOLO_* environment (see kolo.h). */
kolo_status kolo_init(kolo_client** out);
/* Detaches and frees the client; NULL is allowed. */
void kolo_shutdown(kolo_client* client);

int kolo_rank(const kolo_client* client);
int kolo_size(const kolo_client* client);
int kolo_local_rank(const kolo_client* client);
int kolo_local_size(const kolo_client* client);

/* Allocates `bytes` of zero-copy shared memory; free with kolo_free. */
kolo_status kolo_alloc(kolo_client* client, size_t bytes, void** out);
void kolo_free(kolo_client* client, void* ptr);

kolo_status kolo_allreduce_async(kolo_client* client, const void* input, void* output, int dtype,
                                 const int64_t* shape, int ndim, const char* name, int op,
                                 double prescale, double postscale, kolo_handle* out);
kolo_status kolo_allreduce(kolo_client* client, const void* input, void* output, int dtype,
                           const int64_t* shape, int ndim, const char* name, int op);
kolo_status kolo_broadcast_async(kolo_client* client, void* tensor, int dtype, const int64_t* shape,
                                 int ndim, const char* name, int root_rank, kolo_handle* out);
kolo_status kolo_broadcast(kolo_client* client, void* tensor, int dtype, const int64_t* shape,
                           int ndim, const char* name, int root_rank);

kolo_status kolo_allreduce_ex(kolo_client* client, const void* input, void* output, int dtype,
                              const int64_t* shape, int ndim, const char* name,
                              const kolo_allreduce_options* options, kolo_handle* out);
kolo_status kolo_broadcast_ex(kolo_client* client, void* tensor, int dtype, const int64_t* shape,
                              int ndim, const char* name, int root_rank, int process_set,
                              kolo_handle* out);

/* Device (CUDA) tensors: input, output and tensor are cudaMalloc memory of
 * CUDA device `device`; `cuda_stream` is the cudaStream_t that produces the
 * input and consumes the result (NULL: the legacy default stream). Nothing
 * blocks the host: kolo_wait returns once that stream has been made to wait
 * for kolod's result. Every rank of the job takes part (options->process_set
 * must be 0); see kolo::TensorView in kolo.h. A libkolo built without CUDA
 * returns KOLO_UNIMPLEMENTED (12). */
kolo_status kolo_allreduce_device(kolo_client* client, const void* input, void* output, int dtype,
                                  const int64_t* shape, int ndim, const char* name, int device,
                                  void* cuda_stream, const kolo_allreduce_options* options,
                                  kolo_handle* out);
kolo_status kolo_broadcast_device(kolo_client* client, void* tensor, int dtype,
                                  const int64_t* shape, int ndim, const char* name, int root_rank,
                                  int device, void* cuda_stream, kolo_handle* out);

/* Collectives that return a new tensor: *_async gives a handle for
 * kolo_wait_tensor; the blocking forms give the tensor. */
kolo_status kolo_allgather_async(kolo_client* client, const void* input, int dtype,
                                 const int64_t* shape, int ndim, const char* name, int process_set,
                                 kolo_handle* out);
kolo_status kolo_allgather(kolo_client* client, const void* input, int dtype, const int64_t* shape,
                           int ndim, const char* name, int process_set, kolo_tensor** out);
kolo_status kolo_reducescatter(kolo_client* client, const void* input, int dtype,
                               const int64_t* shape, int ndim, const char* name,
                               const kolo_allreduce_options* options, kolo_tensor** out);
/* `splits` (nsplits entries, one per rank of the set) may be NULL for an
 * even split. */
kolo_status kolo_alltoall(kolo_client* client, const void* input, int dtype, const int64_t* shape,
                          int ndim, const int64_t* splits, int nsplits, const char* name,
                          int process_set, kolo_tensor** out);
kolo_status kolo_wait_tensor(kolo_client* client, kolo_handle handle, kolo_tensor** out);

/* Several allreduces negotiated and fused as one unit (blocking). */
kolo_status kolo_grouped_allreduce(kolo_client* client, int count, const void* const* inputs,
                                   void* const* outputs, int dtype, const int64_t* const* shapes,
                                   const int* ndims, const char* const* names,
                                   const kolo_allreduce_options* options);

kolo_status kolo_barrier(kolo_client* client, int process_set);
/* Blocks until every rank has joined; *last_rank gets the last to join. */
kolo_status kolo_join(kolo_client* client, int* last_rank);
kolo_status kolo_add_process_set(kolo_client* client, const int* ranks, int count,
                                 int* process_set);
kolo_status kolo_remove_process_set(kolo_client* client, int process_set);
kolo_status kolo_process_set_rank(kolo_client* client, int process_set, int* rank);
kolo_status kolo_process_set_size(kolo_client* client, int process_set, int* size);

/* The timeline of this job's collectives on this node (the job's ranks
 * attached to this kolod; see kolo::Client::StartTimeline in kolo.h).
 * Starting while recording restarts; max_events 0 is kolod's default. */
kolo_status kolo_timeline_start(kolo_client* client, uint64_t max_events);
/* Stops it. *trace gets the Chrome trace JSON, NUL-terminated, to free with
 * kolo_string_free; *trace_bytes its length, *events and *dropped its
 * counts (each of those three may be NULL). FAILED_PRECONDITION (9) when no
 * timeline is being recorded. kolod writes no file: the caller does. */
kolo_status kolo_timeline_stop(kolo_client* client, char** trace, size_t* trace_bytes,
                               uint64_t* events, uint64_t* dropped);
void kolo_string_free(char* s);

kolo_status kolo_wait(kolo_client* client, kolo_handle handle);
/* *done is set to 1 once complete; a later kolo_wait returns its result. */
kolo_status kolo_test(kolo_client* client, kolo_handle handle, int* done);

const char* kolo_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* KOLO_C_API_H_ */
