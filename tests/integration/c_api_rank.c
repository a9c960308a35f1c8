/* c_api_rank: one rank exercising libkolo's C ABI. Exits 0 when every result
 * was right. Started by collectives_test with the KOLO_* environment. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kolo/c_api.h"

static int failures = 0;

#define EXPECT(cond, what)                                                                   \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      ++failures;                                                                            \
      fprintf(stderr, "FAIL %s:%d: %s (%s)\n", __FILE__, __LINE__, what, kolo_last_error()); \
    }                                                                                        \
  } while (0)

int main(void) {
  kolo_client* c = NULL;
  if (kolo_init(&c) != 0) {
    fprintf(stderr, "kolo_init: %s\n", kolo_last_error());
    return 2;
  }
  const int rank = kolo_rank(c), size = kolo_size(c);
  EXPECT(kolo_local_rank(c) == rank && kolo_local_size(c) == size, "local");

  /* Average in zero-copy memory. */
  float* grad = NULL;
  EXPECT(kolo_alloc(c, 6 * sizeof(float), (void**)&grad) == 0, "alloc");
  int64_t shape[2] = {2, 3};
  for (int i = 0; i < 6; ++i) grad[i] = (float)(rank * 10 + i);
  EXPECT(kolo_allreduce(c, grad, grad, KOLO_FLOAT32, shape, 2, "c/avg", KOLO_AVERAGE) == 0,
         "average");
  for (int i = 0; i < 6; ++i) {
    float want = (float)i + 10.0f * (float)(size - 1) / 2.0f;
    EXPECT(grad[i] == want, "average value");
  }
  kolo_free(c, grad);

  /* Async max in the caller's memory, with test then wait. */
  int64_t in[4], out[4];
  int64_t n = 4;
  for (int i = 0; i < 4; ++i) in[i] = rank * (i + 1);
  kolo_handle h = 0;
  EXPECT(kolo_allreduce_async(c, in, out, KOLO_INT64, &n, 1, "c/max", KOLO_MAX, 1.0, 1.0, &h) == 0,
         "async");
  int done = 0;
  EXPECT(kolo_test(c, h, &done) == 0, "test");
  EXPECT(kolo_wait(c, h) == 0, "wait");
  for (int i = 0; i < 4; ++i) EXPECT(out[i] == (int64_t)(size - 1) * (i + 1), "max value");

  /* Broadcast from the last rank; a scalar (ndim 0). */
  int32_t value = rank == size - 1 ? 4242 : -1;
  EXPECT(kolo_broadcast(c, &value, KOLO_INT32, NULL, 0, "c/bcast", size - 1) == 0, "broadcast");
  EXPECT(value == 4242, "broadcast value");

  /* int16 sum; bool or (max) and and (min) over bytes other than 1. */
  {
    int16_t s16[3] = {(int16_t)(rank + 1), (int16_t)-300, 32767};
    int64_t three = 3;
    EXPECT(kolo_allreduce(c, s16, s16, KOLO_INT16, &three, 1, "c/int16", KOLO_SUM) == 0, "int16");
    EXPECT(s16[0] == size * (size + 1) / 2 && s16[1] == (int16_t)(-300 * size), "int16 sum");
    EXPECT(s16[2] == (int16_t)(uint16_t)(32767u * (unsigned)size), "int16 sum wraps");
    uint8_t any[3] = {0, (uint8_t)(rank == 0 ? 0x80 : 0), 0xFF};
    EXPECT(kolo_allreduce(c, any, any, KOLO_BOOL, &three, 1, "c/bool-or", KOLO_MAX) == 0, "bool");
    EXPECT(any[0] == 0 && any[1] == 1 && any[2] == 1, "bool or");
    uint8_t all[3] = {2, (uint8_t)(rank == 0 ? 0 : 7), 1};
    EXPECT(kolo_allreduce(c, all, all, KOLO_BOOL, &three, 1, "c/bool-and", KOLO_MIN) == 0, "bool");
    EXPECT(all[0] == 1 && all[1] == 0 && all[2] == 1, "bool and");
    EXPECT(kolo_allreduce(c, all, all, KOLO_BOOL, &three, 1, "c/bool-avg", KOLO_AVERAGE) ==
               3 /* INVALID_ARGUMENT */,
           "bool average refused");
    EXPECT(strstr(kolo_last_error(), "bool") != NULL, "the refusal names the dtype");
  }

  /* uint16 past int16's range: sum wraps modulo 65536, max compares unsigned. */
  {
    uint16_t u16[2] = {(uint16_t)(rank + 1), 40000};
    int64_t two = 2;
    EXPECT(kolo_allreduce(c, u16, u16, KOLO_UINT16, &two, 1, "c/uint16", KOLO_SUM) == 0, "uint16");
    EXPECT(u16[0] == size * (size + 1) / 2, "uint16 sum");
    EXPECT(u16[1] == (uint16_t)(40000u * (unsigned)size), "uint16 sum wraps");
    uint16_t big[2] = {(uint16_t)(65535 - rank), (uint16_t)(40000 + rank)};
    EXPECT(kolo_allreduce(c, big, big, KOLO_UINT16, &two, 1, "c/uint16-max", KOLO_MAX) == 0,
           "uint16 max");
    EXPECT(big[0] == 65535 && big[1] == 40000 + size - 1, "uint16 max value");
  }

  /* A mismatch is an error with a message, and the job goes on. */
  float x[3] = {1, 2, 3};
  int64_t len = rank == 0 ? 2 : 3;
  int rc = kolo_allreduce(c, x, x, KOLO_FLOAT32, &len, 1, "c/bad", KOLO_SUM);
  EXPECT(rc == 9 /* FAILED_PRECONDITION */, "mismatch code");
  EXPECT(strstr(kolo_last_error(), "c/bad") != NULL, "mismatch message names the tensor");

  /* Bad arguments are refused locally. */
  EXPECT(kolo_allreduce(c, x, x, 99, &len, 1, "c/dtype", KOLO_SUM) == 3, "bad dtype");
  EXPECT(kolo_wait(c, 123456789) != 0, "unknown handle");

  /* Allgather: rank r gives r + 1 rows of 2. */
  {
    float rows[16];
    int64_t ag_shape[2] = {rank + 1, 2};
    for (int i = 0; i < 2 * (rank + 1); ++i) rows[i] = (float)(rank * 100 + i);
    kolo_tensor* t = NULL;
    EXPECT(kolo_allgather(c, rows, KOLO_FLOAT32, ag_shape, 2, "c/ag", 0, &t) == 0, "allgather");
    if (t != NULL) {
      EXPECT(kolo_tensor_ndim(t) == 2 && kolo_tensor_shape(t)[0] == size * (size + 1) / 2 &&
                 kolo_tensor_shape(t)[1] == 2,
             "allgather shape");
      EXPECT(((const float*)kolo_tensor_data(t))[0] == 0.0f, "allgather first value");
      kolo_tensor_free(t);
    }
  }
  /* Reducescatter (average) and alltoall (even split). */
  {
    double rs_in[12];
    int64_t rs_shape[1] = {12};
    for (int i = 0; i < 12; ++i) rs_in[i] = rank + i;
    kolo_allreduce_options o;
    kolo_allreduce_options_init(&o);
    o.op = KOLO_AVERAGE;
    kolo_tensor* t = NULL;
    EXPECT(kolo_reducescatter(c, rs_in, KOLO_FLOAT64, rs_shape, 1, "c/rs", &o, &t) == 0,
           "reducescatter");
    if (t != NULL) {
      EXPECT(kolo_tensor_bytes(t) > 0, "reducescatter bytes");
      kolo_tensor_free(t);
    }
    int32_t a2a[64];
    int64_t a2a_shape[1] = {size * 2};
    for (int i = 0; i < size * 2; ++i) a2a[i] = rank * 1000 + i;
    t = NULL;
    EXPECT(kolo_alltoall(c, a2a, KOLO_INT32, a2a_shape, 1, NULL, 0, "c/a2a", 0, &t) == 0,
           "alltoall");
    if (t != NULL) {
      EXPECT(kolo_tensor_num_splits(t) == size && kolo_tensor_received_splits(t)[0] == 2,
             "alltoall splits");
      EXPECT(((const int32_t*)kolo_tensor_data(t))[0] == rank * 2, "alltoall value");
      kolo_tensor_free(t);
    }
  }
  /* Barrier, grouped allreduce, a process set, join. */
  EXPECT(kolo_barrier(c, 0) == 0, "barrier");
  {
    float a[2] = {1, 1}, b[3] = {2, 2, 2};
    const void* ins[2] = {a, b};
    void* outs[2] = {a, b};
    int64_t sa[1] = {2}, sb[1] = {3};
    const int64_t* shapes[2] = {sa, sb};
    int ndims[2] = {1, 1};
    const char* names[2] = {"c/g0", "c/g1"};
    EXPECT(kolo_grouped_allreduce(c, 2, ins, outs, KOLO_FLOAT32, shapes, ndims, names, NULL) == 0,
           "grouped allreduce");
    EXPECT(a[0] == size && b[2] == 2.0f * size, "grouped values");
  }
  {
    int members[2] = {0, size - 1};
    int ps = 0, ps_size = 0;
    EXPECT(kolo_add_process_set(c, members, 2, &ps) == 0 && ps > 0, "add process set");
    EXPECT(kolo_process_set_size(c, ps, &ps_size) == 0 && ps_size == 2, "process set size");
    EXPECT(kolo_remove_process_set(c, ps) == 0, "remove process set");
  }
  {
    /* Device entry points: host memory passed as a device tensor is refused
     * by the SDK (no GPU here, or not device memory), before kolod sees it;
     * a negative ordinal is refused as an argument. */
    float h[4] = {0, 0, 0, 0};
    int64_t s4[1] = {4};
    kolo_handle dh = 0;
    EXPECT(kolo_allreduce_device(c, h, h, KOLO_FLOAT32, s4, 1, "c/dev", -1, NULL, NULL, &dh) ==
               3 /* INVALID_ARGUMENT */,
           "device ordinal checked");
    EXPECT(kolo_allreduce_device(c, h, h, KOLO_FLOAT32, s4, 1, "c/dev", 0, NULL, NULL, &dh) != 0,
           "host memory is no device tensor");
    EXPECT(strlen(kolo_last_error()) > 0, "device error says why");
    EXPECT(kolo_broadcast_device(c, h, KOLO_FLOAT32, s4, 1, "c/devb", 0, 0, NULL, &dh) != 0,
           "host memory is no device tensor (broadcast)");
    /* The session goes on working. */
    EXPECT(kolo_barrier(c, 0) == 0, "barrier after refused device calls");
  }
  {
    /* The job's timeline: rank 0 records, every rank reduces, rank 0 gets a
     * trace with a thread row per rank. A stop with nothing recording fails. */
    char* trace = NULL;
    if (rank == 0) {
      EXPECT(kolo_timeline_stop(c, &trace, NULL, NULL, NULL) == 9 /* FAILED_PRECONDITION */,
             "timeline stop without start");
      EXPECT(kolo_timeline_start(c, 0) == 0, "timeline start");
    }
    EXPECT(kolo_barrier(c, 0) == 0, "barrier after timeline start");
    float t[2] = {1, 1};
    int64_t two = 2;
    EXPECT(kolo_allreduce(c, t, t, KOLO_FLOAT32, &two, 1, "c/timeline", KOLO_SUM) == 0,
           "allreduce while recording");
    EXPECT(kolo_barrier(c, 0) == 0, "barrier before timeline stop");
    if (rank == 0) {
      size_t bytes = 0;
      uint64_t events = 0, dropped = 1;
      EXPECT(kolo_timeline_stop(c, &trace, &bytes, &events, &dropped) == 0, "timeline stop");
      if (trace != NULL) {
        EXPECT(strlen(trace) == bytes && bytes > 0, "trace length");
        EXPECT(strstr(trace, "\"REDUCED c/timeline\"") != NULL, "trace names the tensor");
        char tid[32];
        for (int r = 0; r < size; ++r) {
          snprintf(tid, sizeof(tid), "\"tid\":%d,", r);
          EXPECT(strstr(trace, tid) != NULL, "trace has a row per rank");
        }
        EXPECT(events >= (uint64_t)size * 5 && dropped == 0, "trace counts");
        kolo_string_free(trace);
      }
    }
  }
  {
    int last = -1;
    EXPECT(kolo_join(c, &last) == 0 && last >= 0 && last < size, "join");
  }

  kolo_shutdown(c);
  printf("rank %d/%d c_api: %s (%d failures)\n", rank, size, failures ? "FAILED" : "ok", failures);
  return failures == 0 ? 0 : 1;
}
