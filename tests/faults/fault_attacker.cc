// fault_attacker: what a hostile local user or network peer does to kolod in
// the fault matrix's sharing rows (tests/faults/fault_matrix.py), while a
// normal job runs beside it. Each mode holds as much as it can for --hold_s
// seconds, opening again whatever kolod closes, and reports on stdout:
//
//   FAULT_ATTACK started t=T                   once the first wave is out
//   FAULT_ATTACK done opened=N refused=R cut=C held=H codes=CODE:N,...
//
// A code is a gRPC status code's number, "closed" (kolod closed a handoff
// connection) or "connect-ERRNO" (the connection was never made).
// refused: ended by kolod within a second of opening; cut: ended later (a
// deadline); held: still open at the end. Every wait is bounded; SIGTERM
// ends the attack early (the tally is printed all the same).
//
//   fault_attacker streams --target=unix:PATH --streams=N --hold_s=S
//       idle server-reflection streams, 4 per connection, that never send
//   fault_attacker handoff --path=PATH --conns=N --hold_s=S
//       connections to kolod's handoff socket that never send
//   fault_attacker hellos --target=HOST:PORT --streams=N --hold_s=S
//       [--hello_bytes=B] [--job=ID --token=T]
//       Peer.Negotiate streams whose first message is a Hello for a job that
//       does not exist (or --job with a wrong --token), padded to B bytes
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/unique_fd.h"
#include "proto/kolo/v1/peer.pb.h"

namespace {

constexpr char kReflection[] = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";
constexpr char kNegotiate[] = "/kolo.v1.Peer/Negotiate";
constexpr int kStreamsPerChannel = 4;
constexpr absl::Duration kRefusedWithin = absl::Seconds(1);

std::atomic<bool> g_stop{false};  // set by SIGTERM

void OnTerm(int) { g_stop.store(true); }

// Whether the attack goes on: before `end` and not told to stop.
bool Going(absl::Time end) { return !g_stop.load() && absl::Now() < end; }

std::string MonotonicSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return absl::StrFormat("%d.%06d", ts.tv_sec, ts.tv_nsec / 1000);
}

struct Options {
  std::string mode;
  std::string target;
  std::string path;
  int64_t count = 64;
  int64_t hold_s = 10;
  int64_t hello_bytes = 0;
  std::string job;
  std::string token;
};

struct Tally {
  int64_t opened = 0, refused = 0, cut = 0, held = 0;
  std::map<std::string, int64_t> codes;

  void Ended(absl::Time opened_at, const std::string& code) {
    (absl::Now() - opened_at < kRefusedWithin ? refused : cut) += 1;
    codes[code] += 1;
  }
  void Print() const {
    std::vector<std::string> c;
    for (const auto& [code, n] : codes) c.push_back(absl::StrCat(code, ":", n));
    std::printf("FAULT_ATTACK done opened=%lld refused=%lld cut=%lld held=%lld codes=%s\n",
                static_cast<long long>(opened), static_cast<long long>(refused),
                static_cast<long long>(cut), static_cast<long long>(held),
                absl::StrJoin(c, ",").c_str());
    std::fflush(stdout);
  }
};

void Started() {
  std::printf("FAULT_ATTACK started t=%s\n", MonotonicSeconds().c_str());
  std::fflush(stdout);
}

// --- gRPC streams -----------------------------------------------------

// One attacking stream: opened, then (for the Peer) its first message
// written, then a read that ends only when kolod ends the stream.
struct Stream {
  enum class Step { kStart, kWrite, kRead, kFinish } step = Step::kStart;
  std::unique_ptr<grpc::ClientContext> context;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call;
  grpc::ByteBuffer in;
  grpc::Status status;
  absl::Time opened_at;
  bool open = false;
};

grpc::ByteBuffer FirstMessage(const Options& o, int64_t n) {
  kolo::v1::MemberMessage m;
  kolo::v1::Hello* hello = m.mutable_hello();
  hello->set_job_id(o.job.empty() ? absl::StrCat("no-such-job-", getpid(), "-", n) : o.job);
  hello->set_job_token(o.token.empty() ? std::string(32, 'x') : o.token);
  hello->set_node(std::string(static_cast<size_t>(std::max<int64_t>(o.hello_bytes, 1)), 'm'));
  hello->set_size(2);
  hello->add_ranks(1);
  const std::string bytes = m.SerializeAsString();
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

int AttackStreams(const Options& o) {
  const bool peer = o.mode == "hellos";
  const std::string method = peer ? kNegotiate : kReflection;
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  const int64_t nchannels = (o.count + kStreamsPerChannel - 1) / kStreamsPerChannel;
  for (int64_t i = 0; i < nchannels; ++i) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection each
    args.SetInt("kolo.attacker.channel", static_cast<int>(i));
    args.SetMaxSendMessageSize(-1);
    channels.push_back(
        grpc::CreateCustomChannel(o.target, grpc::InsecureChannelCredentials(), args));
  }
  grpc::CompletionQueue cq;
  std::vector<Stream> streams(static_cast<size_t>(o.count));
  // Calls end before their contexts and the queue (members go in reverse).
  Tally tally;
  auto open = [&](size_t i) {
    Stream& s = streams[i];
    s.call.reset();  // the call before its context
    s.status = grpc::Status();
    s.context = std::make_unique<grpc::ClientContext>();
    grpc::GenericStub stub(channels[i / kStreamsPerChannel]);
    s.call = stub.PrepareCall(s.context.get(), method, &cq);
    s.opened_at = absl::Now();
    s.open = true;
    s.step = Stream::Step::kStart;
    s.call->StartCall(reinterpret_cast<void*>(i));
    ++tally.opened;
  };
  for (size_t i = 0; i < streams.size(); ++i) open(i);
  Started();
  const absl::Time end = absl::Now() + absl::Seconds(o.hold_s);
  int64_t n = 0;
  std::deque<std::pair<absl::Time, size_t>> reopen;  // due times, in order
  while (Going(end)) {
    while (!reopen.empty() && reopen.front().first <= absl::Now()) {
      open(reopen.front().second);
      reopen.pop_front();
    }
    void* tag = nullptr;
    bool ok = false;
    const auto next =
        cq.AsyncNext(&tag, &ok, std::chrono::system_clock::now() + std::chrono::milliseconds(10));
    if (next != grpc::CompletionQueue::GOT_EVENT) continue;
    const size_t i = reinterpret_cast<size_t>(tag);
    Stream& s = streams[i];
    switch (s.step) {
      case Stream::Step::kStart:
      case Stream::Step::kWrite:
        if (ok && peer && s.step == Stream::Step::kStart) {
          s.step = Stream::Step::kWrite;
          s.call->Write(FirstMessage(o, n++), tag);
          break;
        }
        if (ok) {
          s.step = Stream::Step::kRead;
          s.call->Read(&s.in, tag);
          break;
        }
        s.step = Stream::Step::kFinish;
        s.call->Finish(&s.status, tag);
        break;
      case Stream::Step::kRead:
        if (ok) {  // kolod answered something: read on until it ends the stream
          s.call->Read(&s.in, tag);
          break;
        }
        s.step = Stream::Step::kFinish;
        s.call->Finish(&s.status, tag);
        break;
      case Stream::Step::kFinish: {
        std::string code = absl::StrCat(s.status.error_code());
        tally.Ended(s.opened_at, code);
        s.open = false;
        reopen.push_back({absl::Now() + absl::Milliseconds(20), i});  // then open it again
        break;
      }
    }
  }
  for (Stream& s : streams) {
    if (s.open) {
      ++tally.held;
      s.context->TryCancel();
    }
  }
  // Drain: every call's outstanding operation completes once cancelled.
  const absl::Time drain_end = absl::Now() + absl::Seconds(10);
  int64_t left = tally.held;
  while (left > 0 && absl::Now() < drain_end) {
    void* tag = nullptr;
    bool ok = false;
    if (cq.AsyncNext(&tag, &ok,
                     std::chrono::system_clock::now() + std::chrono::milliseconds(100)) !=
        grpc::CompletionQueue::GOT_EVENT) {
      continue;
    }
    Stream& s = streams[reinterpret_cast<size_t>(tag)];
    if (s.step == Stream::Step::kFinish) {
      --left;
    } else {
      s.step = Stream::Step::kFinish;
      s.call->Finish(&s.status, tag);
    }
  }
  tally.Print();
  cq.Shutdown();
  void* tag;
  bool ok;
  while (
      cq.AsyncNext(&tag, &ok, std::chrono::system_clock::now() + std::chrono::milliseconds(100)) ==
      grpc::CompletionQueue::GOT_EVENT) {
  }
  _exit(0);  // calls still cancelled in flight need no orderly teardown
}

// --- the handoff socket -------------------------------------------------

kolo::UniqueFd ConnectUnix(const std::string& path) {
  kolo::UniqueFd fd(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return fd;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return kolo::UniqueFd();
  path.copy(addr.sun_path, path.size());
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 &&
      errno != EINPROGRESS) {
    const int e = errno;
    fd = kolo::UniqueFd();
    errno = e;
  }
  return fd;
}

int AttackHandoff(const Options& o) {
  struct Conn {
    kolo::UniqueFd fd;
    absl::Time opened_at;
  };
  std::vector<Conn> conns(static_cast<size_t>(o.count));
  Tally tally;
  auto open = [&](Conn& c) {
    c.fd = ConnectUnix(o.path);
    c.opened_at = absl::Now();
    ++tally.opened;
    // Why a connection failed, by errno's name: EAGAIN is kolod's listen
    // backlog full (it does not accept), EACCES the socket's mode.
    if (!c.fd.valid()) tally.Ended(c.opened_at, absl::StrCat("connect-", strerrorname_np(errno)));
  };
  for (Conn& c : conns) open(c);
  Started();
  const absl::Time end = absl::Now() + absl::Seconds(o.hold_s);
  while (Going(end)) {
    std::vector<pollfd> fds;
    for (Conn& c : conns) fds.push_back({c.fd.valid() ? c.fd.get() : -1, POLLIN, 0});
    poll(fds.data(), fds.size(), 100);
    for (size_t i = 0; i < conns.size(); ++i) {
      Conn& c = conns[i];
      bool closed = !c.fd.valid();
      if (!closed && (fds[i].revents & (POLLIN | POLLHUP | POLLERR))) {
        char b;
        closed = recv(c.fd.get(), &b, 1, MSG_DONTWAIT) <= 0;
        if (closed) tally.Ended(c.opened_at, "closed");
      }
      if (closed) {
        absl::SleepFor(absl::Milliseconds(5));
        open(c);
      }
    }
  }
  for (Conn& c : conns) tally.held += c.fd.valid() ? 1 : 0;
  tally.Print();
  return 0;
}

bool ParseFlag(absl::string_view arg, absl::string_view name, std::string* out) {
  const std::string prefix = absl::StrCat("--", name, "=");
  if (!absl::StartsWith(arg, prefix)) return false;
  *out = std::string(arg.substr(prefix.size()));
  return true;
}

bool ParseFlag(absl::string_view arg, absl::string_view name, int64_t* out) {
  std::string v;
  if (!ParseFlag(arg, name, &v)) return false;
  if (!absl::SimpleAtoi(v, out) || *out < 0) {
    std::fprintf(stderr, "fault_attacker: bad value in %s\n", std::string(arg).c_str());
    std::exit(2);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  o.mode = argc > 1 ? argv[1] : "";
  for (int i = 2; i < argc; ++i) {
    if (ParseFlag(argv[i], "target", &o.target) || ParseFlag(argv[i], "path", &o.path) ||
        ParseFlag(argv[i], "streams", &o.count) || ParseFlag(argv[i], "conns", &o.count) ||
        ParseFlag(argv[i], "hold_s", &o.hold_s) ||
        ParseFlag(argv[i], "hello_bytes", &o.hello_bytes) || ParseFlag(argv[i], "job", &o.job) ||
        ParseFlag(argv[i], "token", &o.token)) {
      continue;
    }
    std::fprintf(stderr, "fault_attacker: unknown argument %s\n", argv[i]);
    return 2;
  }
  signal(SIGTERM, OnTerm);
  o.count = std::min<int64_t>(o.count, 4096);
  o.hold_s = std::min<int64_t>(o.hold_s, 600);
  if ((o.mode == "streams" || o.mode == "hellos") && !o.target.empty()) return AttackStreams(o);
  if (o.mode == "handoff" && !o.path.empty()) return AttackHandoff(o);
  std::fprintf(stderr,
               "usage: fault_attacker streams|hellos --target=T | handoff --path=P "
               "[--streams=N|--conns=N] [--hold_s=S] [--hello_bytes=B] [--job=ID --token=T]\n");
  return 2;
}
