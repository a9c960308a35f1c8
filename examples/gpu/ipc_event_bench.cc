// What interprocess CUDA events cost, as kolod and a rank use them: one
// process (the rank) exports a ready and a done event; the other (kolod)
// opens them. Prints, per operation, the median latency in microseconds:
//
//   query_ipc        cudaEventQuery of an opened (completed) IPC event
//   query_local      the same on a local event
//   wait_ipc         a stream waits on the opened event, a tiny memset,
//                    then a local event is polled until complete
//   wait_local       the same with a local event to wait on
//   wait_none        the memset and the poll alone
//   record_ipc       the memset, a record of the opened event, the poll
//   rank_wait_done   in the rank: its stream waits on the done event kolod
//                    recorded, then cudaStreamSynchronize
//   rank_sync        in the rank: cudaStreamSynchronize alone
//   ping_pong        the two processes take turns: each runs a tiny memset
//                    and synchronizes, then hands over through a pipe; the
//                    time of one turn of each (GPU context switches included)
//   pipe_only        the same hand-over without GPU work
//
// The fork happens before either process touches CUDA.
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

namespace {

constexpr int kIters = 300;

double MedianUs(const std::function<void()>& op) {
  std::vector<double> t;
  for (int i = 0; i < kIters + 20; ++i) {
    const auto a = std::chrono::steady_clock::now();
    op();
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count();
    if (i >= 20) t.push_back(us);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void Poll(cudaEvent_t e) {
  while (cudaEventQuery(e) == cudaErrorNotReady) {
  }
}

#define CHECK(x)                                                          \
  do {                                                                    \
    if ((x) != cudaSuccess) {                                             \
      std::printf("FAIL ipc_event_bench: %s at line %d\n", #x, __LINE__); \
      return 1;                                                           \
    }                                                                     \
  } while (0)

struct Handles {
  cudaIpcEventHandle_t ready;
  cudaIpcEventHandle_t done;
};

int Rank(int to_kolod, int from_kolod) {
  CHECK(cudaSetDevice(0));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t ready, done;
  CHECK(cudaEventCreateWithFlags(&ready, cudaEventInterprocess | cudaEventDisableTiming));
  CHECK(cudaEventCreateWithFlags(&done, cudaEventInterprocess | cudaEventDisableTiming));
  Handles h;
  CHECK(cudaIpcGetEventHandle(&h.ready, ready));
  CHECK(cudaIpcGetEventHandle(&h.done, done));
  CHECK(cudaEventRecord(ready, s));
  CHECK(cudaEventRecord(done, s));
  CHECK(cudaStreamSynchronize(s));
  if (write(to_kolod, &h, sizeof(h)) != sizeof(h)) return 2;
  char c;
  if (read(from_kolod, &c, 1) != 1) return 3;  // kolod measured and recorded `done`
  void* buf = nullptr;
  CHECK(cudaMalloc(&buf, 64));
  const double wait_done = MedianUs([&] {
    cudaMemsetAsync(buf, 0, 64, s);
    cudaStreamWaitEvent(s, done, 0);
    cudaStreamSynchronize(s);
  });
  const double sync = MedianUs([&] {
    cudaMemsetAsync(buf, 0, 64, s);
    cudaStreamSynchronize(s);
  });
  std::printf("%-16s %8.1f\n%-16s %8.1f\n", "rank_wait_done", wait_done, "rank_sync", sync);
  std::fflush(stdout);
  const char go = 1;
  if (write(to_kolod, &go, 1) != 1) return 4;
  // Ping-pong: answer each turn, with GPU work (c == 1) or without (c == 2).
  while (read(from_kolod, &c, 1) == 1 && c != 0) {
    if (c == 1) {
      cudaMemsetAsync(buf, 0, 64, s);
      cudaStreamSynchronize(s);
    }
    if (write(to_kolod, &c, 1) != 1) return 5;
  }
  return 0;
}

int Kolod(int from_rank, int to_rank) {
  Handles h;
  if (read(from_rank, &h, sizeof(h)) != sizeof(h)) return 2;
  CHECK(cudaSetDevice(0));
  cudaEvent_t ready, done, local, wait_on;
  CHECK(cudaIpcOpenEventHandle(&ready, h.ready));
  CHECK(cudaIpcOpenEventHandle(&done, h.done));
  CHECK(cudaEventCreateWithFlags(&local, cudaEventDisableTiming));
  CHECK(cudaEventCreateWithFlags(&wait_on, cudaEventDisableTiming));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  void* buf = nullptr;
  CHECK(cudaMalloc(&buf, 64));
  CHECK(cudaEventRecord(wait_on, s));
  CHECK(cudaStreamSynchronize(s));
  std::printf("%-16s %8.1f\n", "query_ipc", MedianUs([&] { cudaEventQuery(ready); }));
  std::printf("%-16s %8.1f\n", "query_local", MedianUs([&] { cudaEventQuery(local); }));
  std::printf("%-16s %8.1f\n", "wait_ipc", MedianUs([&] {
                cudaStreamWaitEvent(s, ready, 0);
                cudaMemsetAsync(buf, 0, 64, s);
                cudaEventRecord(local, s);
                Poll(local);
              }));
  std::printf("%-16s %8.1f\n", "wait_local", MedianUs([&] {
                cudaStreamWaitEvent(s, wait_on, 0);
                cudaMemsetAsync(buf, 0, 64, s);
                cudaEventRecord(local, s);
                Poll(local);
              }));
  std::printf("%-16s %8.1f\n", "wait_none", MedianUs([&] {
                cudaMemsetAsync(buf, 0, 64, s);
                cudaEventRecord(local, s);
                Poll(local);
              }));
  std::printf("%-16s %8.1f\n", "record_ipc", MedianUs([&] {
                cudaMemsetAsync(buf, 0, 64, s);
                cudaEventRecord(done, s);
                cudaEventRecord(local, s);
                Poll(local);
              }));
  std::fflush(stdout);
  char c = 1;
  if (write(to_rank, &c, 1) != 1) return 3;
  if (read(from_rank, &c, 1) != 1) return 4;  // the rank printed its figures
  for (const char mode : {1, 2}) {
    const double turn = MedianUs([&] {
      if (mode == 1) {
        cudaMemsetAsync(buf, 0, 64, s);
        cudaStreamSynchronize(s);
      }
      char m = mode;
      if (write(to_rank, &m, 1) != 1 || read(from_rank, &m, 1) != 1) std::abort();
    });
    std::printf("%-16s %8.1f\n", mode == 1 ? "ping_pong" : "pipe_only", turn);
  }
  c = 0;
  if (write(to_rank, &c, 1) != 1) return 5;
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main() {
  int up[2], down[2];
  if (pipe(up) != 0 || pipe(down) != 0) return 2;
  const pid_t child = fork();
  if (child == 0) _exit(Rank(up[1], down[0]));
  const int rc = Kolod(up[0], down[1]);
  int status = 0;
  waitpid(child, &status, 0);
  const int child_rc = WIFEXITED(status) ? WEXITSTATUS(status) : 99;
  if (rc != 0 || child_rc != 0) {
    std::printf("FAIL ipc_event_bench: kolod side %d, rank side %d\n", rc, child_rc);
    return 1;
  }
  std::printf("PASS ipc_event_bench\n");
  return 0;
}
