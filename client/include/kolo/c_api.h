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
};

enum kolo_reduce_op {
  KOLO_SUM = 0,
  KOLO_AVERAGE = 1,
  KOLO_MIN = 2,
  KOLO_MAX = 3,
  KOLO_PRODUCT = 4,
};

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

kolo_status kolo_allreduce_async(kolo_client* client, const void* input,
                                 void* output, int dtype, const int64_t* shape,
                                 int ndim, const char* name, int op,
                                 double prescale, double postscale,
                                 kolo_handle* out);
kolo_status kolo_allreduce(kolo_client* client, const void* input,
                           void* output, int dtype, const int64_t* shape,
                           int ndim, const char* name, int op);
kolo_status kolo_broadcast_async(kolo_client* client, void* tensor, int dtype,
                                 const int64_t* shape, int ndim,
                                 const char* name, int root_rank,
                                 kolo_handle* out);
kolo_status kolo_broadcast(kolo_client* client, void* tensor, int dtype,
                           const int64_t* shape, int ndim, const char* name,
                           int root_rank);

kolo_status kolo_wait(kolo_client* client, kolo_handle handle);
/* *done is set to 1 once complete; a later kolo_wait returns its result. */
kolo_status kolo_test(kolo_client* client, kolo_handle handle, int* done);

const char* kolo_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* KOLO_C_API_H_ */
