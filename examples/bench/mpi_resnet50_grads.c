/*
 * mpi_resnet50_grads: the MPI counterpart of Kolo's resnet50_grads, for
 * side-by-side comparison (compare_resnet50.sh). Same workload, statistics
 * and CSV columns; see resnet50_grads.cc for their definitions.
 *
 * The gradient table is not repeated here: it is read from the output of
 * `resnet50_grads --print_shapes` (one "name dim..." line per tensor, in
 * backward order), so both programs reduce exactly the same tensors.
 *
 * Build and run (compare_resnet50.sh does both):
 *   mpicc -O2 -o mpi_resnet50_grads mpi_resnet50_grads.c
 *   mpirun -np 2 ./mpi_resnet50_grads --shapes=FILE [--steps=20] [--warmup=3]
 *       [--check] [--csv] [--variants=per_tensor,fused]
 *       [--per_tensor=blocking|nonblocking] [--bucket_bytes=67108864]
 *
 * Variants, each timed in the same run:
 *   per_tensor  one allreduce per tensor, in backward order: either blocking
 *               MPI_Allreduce calls one after another, or (nonblocking)
 *               every tensor's MPI_Iallreduce started and then one
 *               MPI_Waitall. Blocking is the default: on one node over
 *               shared memory it was the faster of the two (see
 *               compare_resnet50.sh's notes).
 *   fused       hand-made fusion: tensors packed, in backward order, into a
 *               buffer of at most bucket_bytes, one MPI_Allreduce per full
 *               buffer, results unpacked; a tensor larger than the buffer is
 *               reduced on its own.
 * Gradients are the process's own memory, one allocation per tensor,
 * reduced in place. "average" is MPI_SUM followed by a division by the
 * number of ranks (on the packed buffer for the fused variant).
 * tensors_per_response is tensors per MPI allreduce call.
 */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kMaxDims = 8 };

struct Tensor {
  char name[128];
  uint64_t count;  /* float32 elements */
  uint64_t offset; /* index of element 0 in the flat list */
  float* data;
};

struct Config {
  const char* shapes;
  int steps, warmup, check, csv;
  int run_per_tensor, run_fused;
  int nonblocking;
  uint64_t bucket_bytes;
};

/* Returns 1 when `arg` is --name=VALUE, setting *value. */
static int FlagValue(const char* arg, const char* name, const char** value) {
  const size_t n = strlen(name);
  if (strncmp(arg, "--", 2) != 0 || strncmp(arg + 2, name, n) != 0 || arg[2 + n] != '=') {
    return 0;
  }
  *value = arg + 3 + n;
  return 1;
}

static int ParseArgs(int argc, char** argv, struct Config* c) {
  c->shapes = NULL;
  c->steps = 20;
  c->warmup = 3;
  c->check = 0;
  c->csv = 0;
  c->run_per_tensor = 1;
  c->run_fused = 1;
  c->nonblocking = 0;
  c->bucket_bytes = (uint64_t)64 << 20;
  for (int i = 1; i < argc; ++i) {
    const char* v;
    const char* a = argv[i];
    if (FlagValue(a, "shapes", &v))
      c->shapes = v;
    else if (FlagValue(a, "steps", &v))
      c->steps = atoi(v);
    else if (FlagValue(a, "warmup", &v))
      c->warmup = atoi(v);
    else if (FlagValue(a, "bucket_bytes", &v))
      c->bucket_bytes = strtoull(v, NULL, 10);
    else if (FlagValue(a, "variants", &v)) {
      c->run_per_tensor = strstr(v, "per_tensor") != NULL;
      c->run_fused = strstr(v, "fused") != NULL;
    } else if (FlagValue(a, "per_tensor", &v)) {
      if (strcmp(v, "blocking") == 0)
        c->nonblocking = 0;
      else if (strcmp(v, "nonblocking") == 0)
        c->nonblocking = 1;
      else {
        fprintf(stderr, "unknown --per_tensor=%s (want blocking or nonblocking)\n", v);
        return 0;
      }
    } else if (strcmp(a, "--csv") == 0)
      c->csv = 1;
    else if (strcmp(a, "--check") == 0 || strcmp(a, "--check=true") == 0)
      c->check = 1;
    else if (strcmp(a, "--nocheck") == 0 || strcmp(a, "--check=false") == 0)
      c->check = 0;
    else {
      fprintf(stderr, "unknown argument %s\n", a);
      return 0;
    }
  }
  if (c->shapes == NULL || c->steps < 1 || c->warmup < 0 || c->bucket_bytes < 4 ||
      (!c->run_per_tensor && !c->run_fused)) {
    fprintf(stderr,
            "want --shapes=FILE, --steps >= 1, --warmup >= 0, --bucket_bytes >= 4 "
            "and at least one variant\n");
    return 0;
  }
  return 1;
}

/* Reads the "name dim..." table; returns the number of tensors (0 on error)
 * and sets *out to a malloc'd array with `data` unallocated. */
static int ReadShapes(const char* path, struct Tensor** out) {
  FILE* f = fopen(path, "r");
  if (f == NULL) {
    perror(path);
    return 0;
  }
  int n = 0, cap = 0;
  struct Tensor* t = NULL;
  uint64_t offset = 0;
  char line[1024];
  int ok = 1;
  while (ok && fgets(line, sizeof(line), f) != NULL) {
    if (line[0] == '#' || line[0] == '\n') continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 256;
      struct Tensor* grown = realloc(t, sizeof(*t) * (size_t)cap);
      if (grown == NULL) {
        ok = 0;
        break;
      }
      t = grown;
    }
    struct Tensor* cur = &t[n];
    char* save = NULL;
    const char* name = strtok_r(line, " \t\n", &save);
    if (name == NULL || strlen(name) >= sizeof(cur->name)) {
      ok = 0;
      break;
    }
    strcpy(cur->name, name);
    cur->count = 1;
    int dims = 0;
    for (const char* d; (d = strtok_r(NULL, " \t\n", &save)) != NULL; ++dims) {
      char* end;
      const long long v = strtoll(d, &end, 10);
      if (*end != '\0' || v <= 0 || dims == kMaxDims) {
        ok = 0;
        break;
      }
      cur->count *= (uint64_t)v;
    }
    if (dims == 0) ok = 0;
    cur->offset = offset;
    cur->data = NULL;
    offset += cur->count;
    ++n;
  }
  fclose(f);
  if (!ok || n == 0) {
    fprintf(stderr, "%s: not a shape table (want \"name dim...\" lines)\n", path);
    free(t);
    return 0;
  }
  *out = t;
  return n;
}

/* Test data: perf_stats.cc's InputValue and ExpectedValue for an average. */
static float InputValue(int rank, uint64_t index) {
  return (float)((int)((index + 3 * (uint64_t)rank) % 11) - 5);
}

static float ExpectedValue(int ranks, uint64_t index) {
  double acc = 0;
  for (int r = 0; r < ranks; ++r) acc += InputValue(r, index);
  return (float)(acc / ranks);
}

static void Scale(float* data, uint64_t count, float by) {
  for (uint64_t i = 0; i < count; ++i) data[i] *= by;
}

/* A fused workload: tensors [first[b], first[b+1]) go into bucket b. */
struct Buckets {
  int count;
  int* first;
  float* buffer;
};

static int PlanBuckets(const struct Tensor* t, int n, uint64_t bucket_bytes, struct Buckets* b) {
  const uint64_t cap = bucket_bytes / sizeof(float);
  b->first = malloc(sizeof(int) * (size_t)(n + 1));
  b->buffer = malloc(cap * sizeof(float));
  if (b->first == NULL || b->buffer == NULL) return 0;
  b->count = 0;
  uint64_t used = 0;
  for (int i = 0; i < n; ++i) {
    if (b->count == 0 || used + t[i].count > cap) {
      b->first[b->count++] = i;
      used = 0;
    }
    used += t[i].count;
  }
  b->first[b->count] = n;
  return 1;
}

static void StepPerTensor(struct Tensor* t, int n, int size, int nonblocking,
                          MPI_Request* requests) {
  const float inv = 1.0f / (float)size;
  if (!nonblocking) {
    for (int i = 0; i < n; ++i) {
      MPI_Allreduce(MPI_IN_PLACE, t[i].data, (int)t[i].count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      Scale(t[i].data, t[i].count, inv);
    }
    return;
  }
  for (int i = 0; i < n; ++i) {
    MPI_Iallreduce(MPI_IN_PLACE, t[i].data, (int)t[i].count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                   &requests[i]);
  }
  MPI_Waitall(n, requests, MPI_STATUSES_IGNORE);
  for (int i = 0; i < n; ++i) Scale(t[i].data, t[i].count, inv);
}

static void StepFused(struct Tensor* t, const struct Buckets* b, int size) {
  const float inv = 1.0f / (float)size;
  for (int k = 0; k < b->count; ++k) {
    const int lo = b->first[k], hi = b->first[k + 1];
    if (hi - lo == 1) { /* Alone (possibly larger than the buffer): no copy. */
      MPI_Allreduce(MPI_IN_PLACE, t[lo].data, (int)t[lo].count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      Scale(t[lo].data, t[lo].count, inv);
      continue;
    }
    uint64_t used = 0;
    for (int i = lo; i < hi; ++i) {
      memcpy(b->buffer + used, t[i].data, t[i].count * sizeof(float));
      used += t[i].count;
    }
    MPI_Allreduce(MPI_IN_PLACE, b->buffer, (int)used, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    Scale(b->buffer, used, inv);
    used = 0;
    for (int i = lo; i < hi; ++i) {
      memcpy(t[i].data, b->buffer + used, t[i].count * sizeof(float));
      used += t[i].count;
    }
  }
}

static int CompareDoubles(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* `samples` must be sorted; as perf_stats.cc's Median and Percentile. */
static double Median(const double* samples, size_t n) {
  return n % 2 == 1 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
}
static double Percentile(const double* samples, size_t n, double q) {
  double rank = ceil(q * (double)n) - 1;
  if (rank < 0) rank = 0;
  if (rank > (double)(n - 1)) rank = (double)(n - 1);
  return samples[(size_t)rank];
}

enum Variant { kPerTensor, kFused };

static void RunStep(enum Variant v, struct Tensor* t, int n, const struct Buckets* b, int size,
                    int nonblocking, MPI_Request* requests) {
  if (v == kPerTensor)
    StepPerTensor(t, n, size, nonblocking, requests);
  else
    StepFused(t, b, size);
}

/* Warmup, timed steps and the optional check of one variant; rank 0 prints
 * its row. */
static void Measure(const struct Config* c, enum Variant v, struct Tensor* t, int n,
                    const struct Buckets* b, int rank, int size, double* times,
                    MPI_Request* requests) {
  for (int i = 0; i < c->warmup; ++i) RunStep(v, t, n, b, size, c->nonblocking, requests);
  MPI_Barrier(MPI_COMM_WORLD);
  for (int i = 0; i < c->steps; ++i) {
    const double start = MPI_Wtime();
    RunStep(v, t, n, b, size, c->nonblocking, requests);
    times[i] = (MPI_Wtime() - start) * 1e3;
  }
  double wrong = -1;
  if (c->check) {
    for (int i = 0; i < n; ++i) {
      for (uint64_t j = 0; j < t[i].count; ++j) {
        t[i].data[j] = InputValue(rank, t[i].offset + j);
      }
    }
    RunStep(v, t, n, b, size, c->nonblocking, requests);
    wrong = 0;
    for (int i = 0; i < n; ++i) {
      for (uint64_t j = 0; j < t[i].count; ++j) {
        const float want = ExpectedValue(size, t[i].offset + j);
        if (fabsf(t[i].data[j] - want) > 1e-6f + 1e-5f * fabsf(want)) wrong += 1;
      }
    }
  }
  /* Per step the maximum over ranks; the last slot carries the check. */
  times[c->steps] = wrong;
  MPI_Allreduce(MPI_IN_PLACE, times, c->steps + 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (rank != 0) return;
  wrong = times[c->steps];
  qsort(times, (size_t)c->steps, sizeof(double), CompareDoubles);
  const double median = Median(times, (size_t)c->steps);
  const double p90 = Percentile(times, (size_t)c->steps, 0.90);
  uint64_t bytes = 0;
  for (int i = 0; i < n; ++i) bytes += t[i].count * sizeof(float);
  const double algbw = (double)bytes / (median * 1e-3) / 1e9;
  const double busbw = algbw * 2.0 * (size - 1) / size;
  const int calls = v == kPerTensor ? n : b->count;
  char name[64];
  if (v == kPerTensor) {
    snprintf(name, sizeof(name), "mpi_per_tensor_%s", c->nonblocking ? "iallreduce" : "blocking");
  } else {
    snprintf(name, sizeof(name), "mpi_fused_%lluMiB", (unsigned long long)(c->bucket_bytes >> 20));
  }
  if (c->csv) {
    printf("%s,%d,%d,%llu,%d,%.3f,%.3f,%.1f,%.4f,%.4f,%.2f,%lld\n", name, size, n,
           (unsigned long long)bytes, c->steps, median, p90, n / (median * 1e-3), algbw, busbw,
           (double)n / calls, (long long)wrong);
  } else {
    char check[32];
    if (wrong < 0)
      snprintf(check, sizeof(check), "-");
    else if (wrong == 0)
      snprintf(check, sizeof(check), "OK");
    else
      snprintf(check, sizeof(check), "FAIL(%lld)", (long long)wrong);
    printf("%-26s %10.2f %10.2f %10.0f %12.3f %12.3f %13.2f %8s\n", name, median, p90,
           n / (median * 1e-3), algbw, busbw, (double)n / calls, check);
  }
  fflush(stdout);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  struct Config c;
  struct Tensor* t = NULL;
  int n = 0;
  if (!ParseArgs(argc, argv, &c) || (n = ReadShapes(c.shapes, &t)) == 0) {
    MPI_Finalize();
    return 2;
  }
  uint64_t total = 0;
  for (int i = 0; i < n; ++i) {
    t[i].data = calloc(t[i].count, sizeof(float));
    if (t[i].data == NULL || t[i].count > (uint64_t)INT32_MAX) {
      fprintf(stderr, "rank %d: cannot hold tensor %s (%llu elements)\n", rank, t[i].name,
              (unsigned long long)t[i].count);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    total += t[i].count;
  }
  struct Buckets b = {0, NULL, NULL};
  if (c.run_fused && !PlanBuckets(t, n, c.bucket_bytes, &b)) {
    fprintf(stderr, "rank %d: out of memory for the fusion buffer\n", rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  double* times = malloc(sizeof(double) * (size_t)(c.steps + 1));
  MPI_Request* requests = malloc(sizeof(MPI_Request) * (size_t)n);
  if (times == NULL || requests == NULL) {
    fprintf(stderr, "rank %d: out of memory\n", rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (rank == 0) {
    printf(
        "# mpi resnet50_grads: %d ranks, %d tensors, %llu float32 values "
        "(%llu B) per step, average, in place, process memory\n"
        "# steps %d, warmup %d; step time: per step the max over ranks\n",
        size, n, (unsigned long long)total, (unsigned long long)(total * sizeof(float)), c.steps,
        c.warmup);
    if (c.csv) {
      printf(
          "variant,ranks,tensors,bytes,steps,median_ms,p90_ms,tensors_per_s,"
          "algbw_gbps,busbw_gbps,tensors_per_response,wrong\n");
    } else {
      printf("%-26s %10s %10s %10s %12s %12s %13s %8s\n", "variant", "p50(ms)", "p90(ms)",
             "tensors/s", "algbw(GB/s)", "busbw(GB/s)", "tensors/call", "check");
    }
    fflush(stdout);
  }
  if (c.run_per_tensor) Measure(&c, kPerTensor, t, n, &b, rank, size, times, requests);
  if (c.run_fused) Measure(&c, kFused, t, n, &b, rank, size, times, requests);
  for (int i = 0; i < n; ++i) free(t[i].data);
  free(t);
  free(b.first);
  free(b.buffer);
  free(times);
  free(requests);
  MPI_Finalize();
  return 0;
}
