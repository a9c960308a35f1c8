// fault_rank: one rank of a fault-matrix job (tests/faults/fault_matrix.py).
// Runs allreduces in a steady loop, checks every result, and reports on
// stdout in lines the matrix parses, each stamped with CLOCK_MONOTONIC
// seconds (the same clock in every network namespace of the machine):
//
//   FAULT_RANK ready rank=R t=T            after the first step
//   FAULT_RANK done rank=R steps=N t=T     exit 0 after --steps steps
//   FAULT_RANK error rank=R step=K t=T code=CODE msg=MESSAGE   exit 20
//   FAULT_RANK wrong rank=R step=K index=I got=G want=W        exit 21
//   FAULT_RANK exiting rank=R step=K code=C t=T                exit C
//
//   fault_rank loop [--steps=N] [--floats=N] [--exit_rank=R --exit_at=K
//                   --exit_code=C] [--step_ms=M]
//   fault_rank no_drain      a job of one rank whose client submits more
//                            collectives than its completion ring holds and
//                            never reads a completion
//
// The KOLO_* environment says which job and rank; exit 22 when it cannot
// attach.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "kolo/kolo.h"
#include "tests/integration/raw_session.h"

namespace {

constexpr int kExitError = 20;
constexpr int kExitWrong = 21;
constexpr int kExitAttach = 22;

// Seconds of CLOCK_MONOTONIC, to the microsecond.
std::string MonotonicSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return absl::StrFormat("%d.%06d", ts.tv_sec, ts.tv_nsec / 1000);
}

// Prints one report line and flushes it, so that a SIGKILL of this process
// right after loses nothing the matrix needs.
template <typename... Args>
void Report(const Args&... parts) {
  std::string line = absl::StrCat("FAULT_RANK ", parts...);
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

std::string OneLine(absl::string_view text) {
  std::string out(text);
  for (char& ch : out) {
    if (ch == '\n' || ch == '\r') ch = ' ';
  }
  return out;
}

int ReportError(int rank, int64_t step, const absl::Status& s) {
  Report("error rank=", rank, " step=", step, " t=", MonotonicSeconds(),
         " code=", absl::StatusCodeToString(s.code()), " msg=", OneLine(s.message()));
  return kExitError;
}

struct LoopOptions {
  int64_t steps = 0;  // 0: until an error or a signal
  int64_t floats = 1024;
  int exit_rank = -1;
  int64_t exit_at = -1;
  int exit_code = 3;
  int64_t step_ms = 0;  // pause between steps, so a job lasts a while
};

// Rank r's element i at step k; the sum over ranks is exact in float.
float Input(int rank, int64_t step, int64_t i) {
  return static_cast<float>((rank + 1) * ((step + i) % 13));
}

int Loop(kolo::Client& c, const LoopOptions& o) {
  const int rank = c.rank(), size = c.size();
  auto buf = c.Allocate(kolo::DType::kFloat32, {o.floats});
  if (!buf.ok()) return ReportError(rank, 0, buf.status());
  float* data = buf->data_as<float>();
  const float ranks_sum = static_cast<float>(size * (size + 1) / 2);
  for (int64_t step = 0; o.steps == 0 || step < o.steps; ++step) {
    if (rank == o.exit_rank && step == o.exit_at) {
      Report("exiting rank=", rank, " step=", step, " code=", o.exit_code,
             " t=", MonotonicSeconds());
      std::exit(o.exit_code);  // no Detach: the trainer gives up
    }
    for (int64_t i = 0; i < o.floats; ++i) data[i] = Input(rank, step, i);
    absl::Status s =
        c.Allreduce(buf->view(), buf->view(), absl::StrCat("step/", step), kolo::ReduceOp::kSum);
    if (!s.ok()) return ReportError(rank, step, s);
    for (int64_t i = 0; i < o.floats; ++i) {
      const float want = ranks_sum * static_cast<float>((step + i) % 13);
      if (data[i] != want) {
        Report("wrong rank=", rank, " step=", step, " index=", i, " got=", data[i], " want=", want);
        return kExitWrong;
      }
    }
    if (step == 0) Report("ready rank=", rank, " t=", MonotonicSeconds());
    if (o.step_ms > 0) absl::SleepFor(absl::Milliseconds(o.step_ms));
  }
  Report("done rank=", rank, " steps=", o.steps, " t=", MonotonicSeconds());
  return 0;
}

// Submits twice the completion ring's capacity and never pops a completion;
// prints how kolod ended the session.
int NoDrain(const kolo::ClientOptions& options) {
  auto channel =
      grpc::CreateChannel("unix:" + options.socket_path, grpc::InsecureChannelCredentials());
  kolo::v1::DaemonMessage reply;
  bool ok = false;
  kolo::testing::RawAttachOptions attach;
  attach.job_id = options.job_id;
  attach.token = options.job_token;
  auto session = kolo::testing::RawAttach(channel, options.socket_path, attach, &reply, &ok);
  if (!ok) {
    Report("error rank=0 step=0 t=", MonotonicSeconds(), " code=UNAVAILABLE msg=attach refused");
    return kExitAttach;
  }
  Report("ready rank=0 t=", MonotonicSeconds());
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  for (uint64_t id = 1; id <= 2 * kolo::testing::kRawCompletionCap; ++id) {
    if (!session->PushWhenRoom(kolo::testing::AllreduceSlot(id, absl::StrCat("step/", id)),
                               deadline)) {
      break;  // kolod stopped reading: the session has ended
    }
  }
  kolo::v1::JobEvent event = session->ReadUntilEnd();
  const auto code = static_cast<absl::StatusCode>(event.code());
  if (code == absl::StatusCode::kOk) {
    Report("done rank=0 steps=", 2 * kolo::testing::kRawCompletionCap, " t=", MonotonicSeconds());
    return 0;
  }
  return ReportError(0, 0, absl::Status(code, event.message()));
}

bool ParseFlag(absl::string_view arg, absl::string_view name, int64_t* out) {
  const std::string prefix = absl::StrCat("--", name, "=");
  if (!absl::StartsWith(arg, prefix)) return false;
  if (!absl::SimpleAtoi(arg.substr(prefix.size()), out)) {
    std::fprintf(stderr, "fault_rank: bad value in %s\n", std::string(arg).c_str());
    std::exit(2);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "loop";
  LoopOptions o;
  for (int i = 2; i < argc; ++i) {
    int64_t v = 0;
    if (ParseFlag(argv[i], "steps", &o.steps)) continue;
    if (ParseFlag(argv[i], "floats", &o.floats)) continue;
    if (ParseFlag(argv[i], "exit_at", &o.exit_at)) continue;
    if (ParseFlag(argv[i], "step_ms", &o.step_ms)) continue;
    if (ParseFlag(argv[i], "exit_rank", &v)) {
      o.exit_rank = static_cast<int>(v);
      continue;
    }
    if (ParseFlag(argv[i], "exit_code", &v)) {
      o.exit_code = static_cast<int>(v);
      continue;
    }
    std::fprintf(stderr, "fault_rank: unknown argument %s\n", argv[i]);
    return 2;
  }
  auto options = kolo::ClientOptions::FromEnv();
  if (!options.ok()) {
    std::fprintf(stderr, "%s\n", options.status().ToString().c_str());
    return 2;
  }
  if (mode == "no_drain") return NoDrain(*options);
  if (mode != "loop") {
    std::fprintf(stderr, "fault_rank: unknown mode %s\n", mode.c_str());
    return 2;
  }
  options->arena_bytes = std::max<uint64_t>(uint64_t{64} << 20, 8 * o.floats * sizeof(float));
  auto client = kolo::Client::Connect(*options);
  if (!client.ok()) {
    ReportError(options->rank, 0, client.status());
    return kExitAttach;
  }
  return Loop(**client, o);
}
