// idle_streams: a test's attacker (see call_shares_test.cc). Opens many
// idle gRPC streams on a kolod, half server reflection (the client never
// sends a request, so the server waits) and half health Watch, and reports
// how kolod ended each; round after round, until its standard input closes.
//
//   idle_streams TARGET STREAMS CHANNELS
//
// Prints "open" once the first round's streams are all started, then one
// line per round:
//   round N refused R closed C unimplemented U other O closed_ms MIN MAX
// where refused ended RESOURCE_EXHAUSTED, closed ended DEADLINE_EXCEEDED by
// kolod ("presented no credentials"), unimplemented is kolod's answer to
// Watch, and other is anything else (its first message on a line of its own,
// "other: ...").
#include <poll.h>
#include <unistd.h>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"

namespace {

constexpr char kReflection[] = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";
// A bound for a broken kolod, well past any deadline the test gives it.
constexpr int kClientDeadlineS = 30;

struct Stream {
  grpc::ClientContext context;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> reflection;
  std::unique_ptr<grpc::ClientAsyncReader<grpc::health::v1::HealthCheckResponse>> watch;
  grpc::Status status;
};

struct Tally {
  int refused = 0, closed = 0, unimplemented = 0, other = 0;
  int64_t closed_min_ms = 0, closed_max_ms = 0;
  std::string first_other;
};

void* Tag(size_t i, bool finish) { return reinterpret_cast<void*>(i * 2 + (finish ? 1 : 0)); }

Tally RunRound(const std::vector<std::shared_ptr<grpc::Channel>>& channels, int n, bool first) {
  grpc::CompletionQueue cq;
  std::vector<std::unique_ptr<Stream>> streams;
  const absl::Time start = absl::Now();
  for (int i = 0; i < n; ++i) {
    auto s = std::make_unique<Stream>();
    s->context.set_deadline(std::chrono::system_clock::now() +
                            std::chrono::seconds(kClientDeadlineS));
    const auto& channel = channels[i % channels.size()];
    if (i % 2 == 0) {
      grpc::GenericStub stub(channel);
      s->reflection = stub.PrepareCall(&s->context, kReflection, &cq);
      s->reflection->StartCall(Tag(i, false));
      s->reflection->Finish(&s->status, Tag(i, true));
    } else {
      auto stub = grpc::health::v1::Health::NewStub(channel);
      s->watch = stub->PrepareAsyncWatch(&s->context, grpc::health::v1::HealthCheckRequest(), &cq);
      s->watch->StartCall(Tag(i, false));
      s->watch->Finish(&s->status, Tag(i, true));
    }
    streams.push_back(std::move(s));
  }
  if (first) {
    std::printf("open\n");
    std::fflush(stdout);
  }
  Tally t;
  t.closed_min_ms = INT64_MAX;
  for (int finished = 0; finished < n;) {
    void* tag = nullptr;
    bool ok = false;
    if (!cq.Next(&tag, &ok)) break;
    const uintptr_t v = reinterpret_cast<uintptr_t>(tag);
    if ((v & 1) == 0) continue;  // a start
    ++finished;
    const grpc::Status& st = streams[v / 2]->status;
    const int64_t ms = absl::ToInt64Milliseconds(absl::Now() - start);
    if (st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++t.refused;
    } else if (st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
               absl::StrContains(st.error_message(), "presented no credentials")) {
      ++t.closed;
      t.closed_min_ms = std::min(t.closed_min_ms, ms);
      t.closed_max_ms = std::max(t.closed_max_ms, ms);
    } else if (st.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
      ++t.unimplemented;
    } else {
      if (t.other++ == 0)
        t.first_other = st.error_message() + " (" + std::to_string(st.error_code()) + ")";
    }
  }
  if (t.closed == 0) t.closed_min_ms = 0;
  cq.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (cq.Next(&tag, &ok)) {
  }
  return t;
}

// Whether the test closed (or wrote to) our standard input.
bool Stopped() {
  pollfd p{0, POLLIN, 0};
  return poll(&p, 1, 0) != 0;
}

}  // namespace

int main(int argc, char** argv) {
  int n = 0, channels = 0;
  if (argc != 4 || !absl::SimpleAtoi(argv[2], &n) || !absl::SimpleAtoi(argv[3], &channels) ||
      n < 1 || channels < 1) {
    std::fprintf(stderr, "usage: idle_streams TARGET STREAMS CHANNELS\n");
    return 2;
  }
  std::vector<std::shared_ptr<grpc::Channel>> chans;
  for (int c = 0; c < channels; ++c) {
    // A connection of its own for each channel.
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt("kolo.test.channel", c);
    chans.push_back(grpc::CreateCustomChannel(argv[1], grpc::InsecureChannelCredentials(), args));
  }
  for (int round = 1;; ++round) {
    const Tally t = RunRound(chans, n, round == 1);
    std::printf("round %d refused %d closed %d unimplemented %d other %d closed_ms %lld %lld\n",
                round, t.refused, t.closed, t.unimplemented, t.other,
                static_cast<long long>(t.closed_min_ms), static_cast<long long>(t.closed_max_ms));
    if (t.other > 0) std::printf("other: %s\n", t.first_other.c_str());
    std::fflush(stdout);
    if (Stopped()) return 0;
  }
}
