/*
 * mpi_allreduce_perf: the MPI_Allreduce counterpart of Kolo's allreduce_perf,
 * for side-by-side comparison (compare_mpi.sh). Same sweep, test data,
 * statistics and columns; see allreduce_perf.cc for their definitions:
 *   time  = max over ranks of each rank's median per-call time
 *   algbw = size / time, busbw = algbw * 2(n-1)/n (GB/s = 1e9 B/s)
 *   check = max over ranks of wrong elements after one call on fresh data
 *
 * Build and run (compare_mpi.sh does both):
 *   mpicc -O2 -o mpi_allreduce_perf mpi_allreduce_perf.c
 *   mpirun -np 2 ./mpi_allreduce_perf [--min_bytes=4] [--max_bytes=268435456]
 *       [--iters=20] [--warmup=5] [--op=sum|average|min|max|prod]
 *       [--nocheck] [--csv] [--latency] [--latency_bytes=8]
 *       [--latency_iters=20000] [--latency_warmup=1000]
 *
 * Buffers are the process's own memory, reduced in place (MPI_IN_PLACE).
 * "average" is MPI_SUM followed by a division by the number of ranks.
 */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum Op { OP_SUM, OP_AVERAGE, OP_MIN, OP_MAX, OP_PROD };

struct Config {
  uint64_t min_bytes, max_bytes;
  int iters, warmup;
  enum Op op;
  const char* op_name;
  int check, csv, latency;
  uint64_t latency_bytes;
  int latency_iters, latency_warmup;
};

static int ParseOp(const char* name, enum Op* op) {
  if (strcmp(name, "sum") == 0)
    *op = OP_SUM;
  else if (strcmp(name, "average") == 0 || strcmp(name, "avg") == 0)
    *op = OP_AVERAGE;
  else if (strcmp(name, "min") == 0)
    *op = OP_MIN;
  else if (strcmp(name, "max") == 0)
    *op = OP_MAX;
  else if (strcmp(name, "prod") == 0 || strcmp(name, "product") == 0)
    *op = OP_PROD;
  else
    return 0;
  return 1;
}

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
  c->min_bytes = 4;
  c->max_bytes = (uint64_t)256 << 20;
  c->iters = 20;
  c->warmup = 5;
  c->op = OP_SUM;
  c->op_name = "sum";
  c->check = 1;
  c->csv = 0;
  c->latency = 0;
  c->latency_bytes = 8;
  c->latency_iters = 20000;
  c->latency_warmup = 1000;
  for (int i = 1; i < argc; ++i) {
    const char* v;
    const char* a = argv[i];
    if (FlagValue(a, "min_bytes", &v))
      c->min_bytes = strtoull(v, NULL, 10);
    else if (FlagValue(a, "max_bytes", &v))
      c->max_bytes = strtoull(v, NULL, 10);
    else if (FlagValue(a, "iters", &v))
      c->iters = atoi(v);
    else if (FlagValue(a, "warmup", &v))
      c->warmup = atoi(v);
    else if (FlagValue(a, "latency_bytes", &v))
      c->latency_bytes = strtoull(v, NULL, 10);
    else if (FlagValue(a, "latency_iters", &v))
      c->latency_iters = atoi(v);
    else if (FlagValue(a, "latency_warmup", &v))
      c->latency_warmup = atoi(v);
    else if (FlagValue(a, "op", &v)) {
      if (!ParseOp(v, &c->op)) {
        fprintf(stderr, "unknown --op=%s (want sum, average, min, max or prod)\n", v);
        return 0;
      }
      c->op_name = v;
    } else if (strcmp(a, "--csv") == 0)
      c->csv = 1;
    else if (strcmp(a, "--latency") == 0)
      c->latency = 1;
    else if (strcmp(a, "--nocheck") == 0 || strcmp(a, "--check=false") == 0)
      c->check = 0;
    else if (strcmp(a, "--check") == 0 || strcmp(a, "--check=true") == 0)
      c->check = 1;
    else {
      fprintf(stderr, "unknown argument %s\n", a);
      return 0;
    }
  }
  if (c->iters < 1 || c->latency_iters < 1 || c->warmup < 0 || c->latency_warmup < 0 ||
      c->max_bytes < 4 || c->min_bytes > c->max_bytes) {
    fprintf(stderr, "bad sizes or counts\n");
    return 0;
  }
  return 1;
}

/* Test data: identical to perf_stats.cc's InputValue. */
static float InputValue(enum Op op, int rank, uint64_t index) {
  const uint64_t r = (uint64_t)rank;
  static const float kFactors[3] = {1.0f, -1.0f, 2.0f};
  switch (op) {
    case OP_MIN:
    case OP_MAX:
      return (float)((int)((index * 7 + r * 3) % 23) - 11);
    case OP_PROD:
      return kFactors[(index + r) % 3];
    default:
      return (float)((int)((index + 3 * r) % 11) - 5);
  }
}

static float ExpectedValue(enum Op op, int ranks, uint64_t index) {
  double acc = InputValue(op, 0, index);
  for (int r = 1; r < ranks; ++r) {
    const double v = InputValue(op, r, index);
    if (op == OP_MIN)
      acc = v < acc ? v : acc;
    else if (op == OP_MAX)
      acc = v > acc ? v : acc;
    else if (op == OP_PROD)
      acc *= v;
    else
      acc += v;
  }
  if (op == OP_AVERAGE) acc /= ranks;
  return (float)acc;
}

static void FillInput(enum Op op, int rank, float* data, uint64_t count) {
  for (uint64_t i = 0; i < count; ++i) data[i] = InputValue(op, rank, i);
}

static uint64_t CountMismatches(enum Op op, int ranks, const float* data, uint64_t count) {
  uint64_t wrong = 0;
  for (uint64_t i = 0; i < count; ++i) {
    const float want = ExpectedValue(op, ranks, i);
    const int ok =
        op == OP_AVERAGE ? fabsf(data[i] - want) <= 1e-6f + 1e-5f * fabsf(want) : data[i] == want;
    if (!ok) ++wrong;
  }
  return wrong;
}

static int CompareDoubles(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* `samples` must be sorted. */
static double Median(const double* samples, size_t n) {
  return n % 2 == 1 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
}
static double Percentile(const double* samples, size_t n, double q) {
  double rank = ceil(q * (double)n) - 1;
  if (rank < 0) rank = 0;
  if (rank > (double)(n - 1)) rank = (double)(n - 1);
  return samples[(size_t)rank];
}

static void Allreduce(const struct Config* c, float* data, uint64_t count, int size) {
  MPI_Op op = MPI_SUM;
  if (c->op == OP_MIN)
    op = MPI_MIN;
  else if (c->op == OP_MAX)
    op = MPI_MAX;
  else if (c->op == OP_PROD)
    op = MPI_PROD;
  MPI_Allreduce(MPI_IN_PLACE, data, (int)count, MPI_FLOAT, op, MPI_COMM_WORLD);
  if (c->op == OP_AVERAGE) {
    for (uint64_t i = 0; i < count; ++i) data[i] /= (float)size;
  }
}

/* Warmup, timed calls (sorted times in `times_us`), then the check. */
static int64_t MeasureOne(const struct Config* c, float* buf, uint64_t count, int warmup, int iters,
                          double* times_us, int rank, int size) {
  FillInput(c->op, rank, buf, count);
  for (int i = 0; i < warmup; ++i) Allreduce(c, buf, count, size);
  for (int i = 0; i < iters; ++i) {
    const double start = MPI_Wtime();
    Allreduce(c, buf, count, size);
    times_us[i] = (MPI_Wtime() - start) * 1e6;
  }
  qsort(times_us, (size_t)iters, sizeof(double), CompareDoubles);
  if (!c->check) return -1;
  FillInput(c->op, rank, buf, count);
  Allreduce(c, buf, count, size);
  return (int64_t)CountMismatches(c->op, size, buf, count);
}

static const char* CheckText(int64_t wrong, char* buf, size_t len) {
  if (wrong < 0) return "-";
  if (wrong == 0) return "OK";
  snprintf(buf, len, "FAIL(%lld)", (long long)wrong);
  return buf;
}

static void Preamble(const struct Config* c, int size, const char* what) {
  printf(
      "# mpi allreduce_perf %s: %d ranks, float32 %s, in place, process memory\n"
      "# time: max over ranks of each rank's median (latency: of each percentile)\n",
      what, size, c->op_name);
}

static int RunSweep(const struct Config* c, int rank, int size) {
  uint64_t largest = 4;
  for (uint64_t b = c->min_bytes; b <= c->max_bytes; b *= 2) {
    uint64_t r = (b / 4 ? b / 4 : 1) * 4;
    if (r <= c->max_bytes) largest = r;
    if (b > c->max_bytes / 2) break;
  }
  float* buf = malloc(largest);
  double* times = malloc(sizeof(double) * (size_t)c->iters);
  if (buf == NULL || times == NULL) {
    fprintf(stderr, "out of memory\n");
    return 0;
  }
  if (rank == 0) {
    Preamble(c, size, "sweep");
    printf("# warmup %d, iters %d\n", c->warmup, c->iters);
    if (c->csv)
      printf("size_bytes,count,time_us,algbw_gbps,busbw_gbps,wrong\n");
    else
      printf("%12s %12s %11s %11s %11s %8s\n", "size(B)", "count", "time(us)", "algbw(GB/s)",
             "busbw(GB/s)", "check");
    fflush(stdout);
  }
  uint64_t last = 0;
  for (uint64_t b = c->min_bytes ? c->min_bytes : 1;; b *= 2) {
    const uint64_t bytes = (b / 4 ? b / 4 : 1) * 4;
    if (bytes > c->max_bytes) break;
    if (bytes != last) {
      last = bytes;
      const uint64_t count = bytes / 4;
      const int64_t wrong = MeasureOne(c, buf, count, c->warmup, c->iters, times, rank, size);
      double stats[2] = {Median(times, (size_t)c->iters), (double)wrong};
      MPI_Allreduce(MPI_IN_PLACE, stats, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (rank == 0) {
        const double algbw = (double)bytes / (stats[0] * 1e-6) / 1e9;
        const double busbw = algbw * 2.0 * (size - 1) / size;
        char check[32];
        if (c->csv) {
          printf("%llu,%llu,%.3f,%.4f,%.4f,%lld\n", (unsigned long long)bytes,
                 (unsigned long long)count, stats[0], algbw, busbw, (long long)stats[1]);
        } else {
          printf("%12llu %12llu %11.2f %11.3f %11.3f %8s\n", (unsigned long long)bytes,
                 (unsigned long long)count, stats[0], algbw, busbw,
                 CheckText((int64_t)stats[1], check, sizeof(check)));
        }
        fflush(stdout);
      }
    }
    if (b > c->max_bytes / 2) break;
  }
  free(times);
  free(buf);
  return 1;
}

static int RunLatency(const struct Config* c, int rank, int size) {
  const uint64_t count = c->latency_bytes / 4 ? c->latency_bytes / 4 : 1;
  float* buf = malloc(count * 4);
  double* times = malloc(sizeof(double) * (size_t)c->latency_iters);
  if (buf == NULL || times == NULL) {
    fprintf(stderr, "out of memory\n");
    return 0;
  }
  const int64_t wrong =
      MeasureOne(c, buf, count, c->latency_warmup, c->latency_iters, times, rank, size);
  const size_t n = (size_t)c->latency_iters;
  double stats[4] = {Percentile(times, n, 0.50), Percentile(times, n, 0.90),
                     Percentile(times, n, 0.99), (double)wrong};
  MPI_Allreduce(MPI_IN_PLACE, stats, 4, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) {
    char check[32];
    Preamble(c, size, "latency");
    printf("# warmup %d\n", c->latency_warmup);
    if (c->csv) {
      printf("size_bytes,iters,p50_us,p90_us,p99_us,wrong\n");
      printf("%llu,%d,%.3f,%.3f,%.3f,%lld\n", (unsigned long long)(count * 4), c->latency_iters,
             stats[0], stats[1], stats[2], (long long)stats[3]);
    } else {
      printf("%12s %10s %10s %10s %10s %8s\n", "size(B)", "iters", "p50(us)", "p90(us)", "p99(us)",
             "check");
      printf("%12llu %10d %10.2f %10.2f %10.2f %8s\n", (unsigned long long)(count * 4),
             c->latency_iters, stats[0], stats[1], stats[2],
             CheckText((int64_t)stats[3], check, sizeof(check)));
    }
    fflush(stdout);
  }
  free(times);
  free(buf);
  return 1;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  struct Config c;
  if (!ParseArgs(argc, argv, &c)) {
    MPI_Finalize();
    return 2;
  }
  const int ok = c.latency ? RunLatency(&c, rank, size) : RunSweep(&c, rank, size);
  MPI_Finalize();
  return ok ? 0 : 1;
}
