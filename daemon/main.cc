// kolod: the per-node Kolo daemon.
#include <malloc.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <tuple>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/synchronization/mutex.h"
#include "daemon/config.h"
#include "daemon/daemon.h"
#include "daemon/transport/ucx_transport.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, socket, "",
          "Unix socket to serve on (env KOLO_SOCKET; default "
          "/run/kolo/kolod.sock)");
ABSL_FLAG(std::string, socket_mode, "0660",
          "permissions of the socket file, octal; who may connect");
ABSL_FLAG(std::string, fusion_threshold, "",
          "largest fused response, bytes with optional K/M/G suffix (env "
          "KOLO_FUSION_THRESHOLD; default 64M)");
ABSL_FLAG(int, workers, 0,
          "threads that reduce large tensors besides the executing one; 0 = "
          "one per core minus one");
ABSL_FLAG(int, spin_us, -1,
          "microseconds a session's ingress spins after activity before it "
          "sleeps (env KOLO_SPIN_US; default 50)");
ABSL_FLAG(std::string, socket_group, "",
          "group to own the socket, so its members may attach (e.g. kolo)");
ABSL_FLAG(std::string, status_address, "127.0.0.1:7370",
          "HOST:PORT for the Status and Admin services over TCP (port 0 picks "
          "one); empty disables");
ABSL_FLAG(std::string, metrics_address, "",
          "HOST:PORT for Prometheus metrics over HTTP at /metrics; empty "
          "disables");
ABSL_FLAG(std::string, admin_token_file, "",
          "file holding the admin token for Admin calls; created (mode 0600) "
          "with a random token if absent; default admin.token beside the "
          "socket");
ABSL_FLAG(std::string, stall_warning_s, "",
          "seconds a tensor may wait before it is reported as stalled (env "
          "KOLO_STALL_WARNING_S; default 60)");
ABSL_FLAG(std::string, stall_timeout_s, "",
          "seconds after which a stalled tensor aborts its job with "
          "DEADLINE_EXCEEDED; 0 = never (env KOLO_STALL_TIMEOUT_S; default 0)");
ABSL_FLAG(std::string, peer_address, "127.0.0.1:7371",
          "HOST:PORT where the daemons of multi-node jobs reach this one (port "
          "0 picks one); give this host's cluster address on a cluster; empty "
          "disables multi-node jobs");
ABSL_FLAG(std::string, node_name, "", "this node's name in messages (default hostname:peer port)");
ABSL_FLAG(std::string, peer_timeout_s, "",
          "seconds of silence after which a peer daemon counts as lost and its "
          "jobs are aborted (env KOLO_PEER_TIMEOUT_S; default 10)");
ABSL_FLAG(std::string, transfer_timeout_s, "",
          "seconds data transfers with another node may make no progress "
          "before the job fails naming that node; 0 = never (env "
          "KOLO_TRANSFER_TIMEOUT_S; default 60)");
ABSL_FLAG(std::string, nccl_init_timeout_s, "",
          "device tensors: seconds joining a job's NCCL communicator may take "
          "(env KOLO_NCCL_INIT_TIMEOUT_S; default 120)");
ABSL_FLAG(std::string, nccl_timeout_s, "",
          "device tensors: seconds one collective may take before the job's "
          "NCCL communicator is aborted (env KOLO_NCCL_TIMEOUT_S; default 300)");
// Peer plane security (see DaemonConfig and ResolvePeerPlane).
ABSL_FLAG(std::string, peer_tls_ca, "",
          "PEM file: the CA that signs every daemon's peer certificate; with "
          "--peer_tls_cert and --peer_tls_key, the Peer plane runs mutual TLS");
ABSL_FLAG(std::string, peer_tls_cert, "",
          "PEM file: this daemon's peer certificate (it must name the host "
          "part of --peer_address)");
ABSL_FLAG(std::string, peer_tls_key, "", "PEM file: the private key of --peer_tls_cert");
ABSL_FLAG(bool, peer_plaintext, false,
          "run the Peer plane without TLS (trusted networks and tests only); "
          "without TLS files or this flag, a non-loopback --peer_address is "
          "refused and a loopback one leaves multi-node jobs off");
ABSL_FLAG(int, response_cache, 1024,
          "names a coordinator remembers as cache bits (multi-node jobs)");
ABSL_FLAG(bool, direct_ready, true,
          "multi-node jobs whose rank 0 is here: names every node has cached negotiate "
          "directly between the nodes over the data plane, not through this kolod");
ABSL_FLAG(int, max_job_ranks, 65536, "largest job (ranks in all) a client may attach to");
ABSL_FLAG(int, max_sessions, 1024, "attached client processes this kolod serves at once");
ABSL_FLAG(int, max_sessions_per_uid, 256, "attached client processes of one user at once");
ABSL_FLAG(int, max_pending_per_rank, 4096,
          "tensors one rank may have submitted that are not yet planned");
ABSL_FLAG(std::string, attach_timeout_s, "10",
          "seconds a client has to complete its handoff and its AttachRequest");
ABSL_FLAG(std::string, anonymous_call_deadline_s, "5",
          "seconds a gRPC call that presents no credentials (handoff ticket or admin token) "
          "may stay open, whatever service it opened (reflection, health)");
ABSL_FLAG(int, max_anonymous_calls, 16,
          "gRPC calls without credentials one identity (a uid on the socket, a source address "
          "on the status port) may hold at once");
ABSL_FLAG(int, max_handoffs_per_uid, 16,
          "handoff connections in progress (accepted, not yet answered) one uid may hold at "
          "once; the total is 128");
ABSL_FLAG(int, max_status_calls_per_address, 16,
          "gRPC calls one source address (or the admin token) may hold at once on the status "
          "port");
ABSL_FLAG(std::string, elastic_timeout_s, "600",
          "elastic jobs: seconds an attaching rank waits for its membership epoch to form");
ABSL_FLAG(std::string, elastic_rejoin_grace_s, "10",
          "elastic jobs: seconds a rank that detached to reset is waited for before the next "
          "epoch forms without it");
ABSL_FLAG(bool, caller_memory, true,
          "one-node jobs: reach tensors in the ranks' own memory (cross-memory attach) "
          "instead of copying them through shared memory");
ABSL_FLAG(bool, allow_weak_job_tokens, false,
          "accept job tokens under 128 bits (32 characters); only for a node with one user");
ABSL_FLAG(int, exit_when_idle_s, 0,
          "exit once no job has been running for this many seconds, counted from the start "
          "too (a private kolod of one job, started by kolorun or libkolo); 0: never");
ABSL_FLAG(std::string, log_level, "",
          "trace, debug, info, warn, error (env KOLO_LOG_LEVEL; default info)");

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "kolod: %s\n", message.c_str());
  return 2;
}

// kolod's threads come and go with jobs (a job's negotiator, link and UCX
// progress threads); glibc gives such threads arenas of their own, and the
// memory a finished job freed there stayed resident (the two-daemon soak:
// +18 MiB over 1,000 short jobs). A few shared arenas keep it flat (+2 MiB);
// MALLOC_ARENA_MAX in the environment still decides where it is set.
constexpr int kMallocArenas = 4;

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("MALLOC_ARENA_MAX") == nullptr) mallopt(M_ARENA_MAX, kMallocArenas);
  // Before any thread starts: it sets variables UCX reads later.
  kolo::daemon::SetUcxDefaults();
  absl::SetProgramUsageMessage("the Kolo node daemon.\n  kolod --socket PATH [flags]");
  // Abseil's --help lists the flags of a file named after the program
  // (kolod.cc); kolod's are in daemon/main.cc.
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view file) {
    return absl::StrContains(file, "daemon/main.cc");
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  absl::SetFlagsUsageConfig(usage);
  absl::ParseCommandLine(argc, argv);
  // Abseil's lock-order graph (on in this build of the library) costs a
  // graph update on every nested lock, on kolod's hot paths; lock order is
  // checked by the unit tests, which keep it, and by the TSan runs.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  kolo::daemon::DaemonConfig config;
  if (absl::Status s = kolo::daemon::ApplyEnvironment(&config); !s.ok()) {
    return Fail(std::string(s.message()));
  }
  if (!absl::GetFlag(FLAGS_socket).empty()) {
    config.socket_path = absl::GetFlag(FLAGS_socket);
  }
  {
    const std::string mode = absl::GetFlag(FLAGS_socket_mode);
    char* end = nullptr;
    unsigned long m = std::strtoul(mode.c_str(), &end, 8);
    if (mode.empty() || *end != '\0' || m > 0777) {
      return Fail("--socket_mode wants an octal mode such as 0660");
    }
    config.socket_mode = static_cast<uint32_t>(m);
  }
  if (!absl::GetFlag(FLAGS_fusion_threshold).empty()) {
    auto bytes = kolo::daemon::ParseBytes(absl::GetFlag(FLAGS_fusion_threshold));
    if (!bytes.ok()) return Fail("--fusion_threshold: " + std::string(bytes.status().message()));
    config.fusion_threshold_bytes = *bytes;
  }
  if (absl::GetFlag(FLAGS_workers) < 0) return Fail("--workers must be >= 0");
  config.worker_threads = absl::GetFlag(FLAGS_workers);
  if (int spin = absl::GetFlag(FLAGS_spin_us); spin >= 0) {
    config.spin = absl::Microseconds(spin);
  }
  config.socket_group = absl::GetFlag(FLAGS_socket_group);
  config.status_address = absl::GetFlag(FLAGS_status_address);
  config.metrics_address = absl::GetFlag(FLAGS_metrics_address);
  config.admin_token_file = absl::GetFlag(FLAGS_admin_token_file);
  config.peer_address = absl::GetFlag(FLAGS_peer_address);
  config.node_name = absl::GetFlag(FLAGS_node_name);
  // Peer plane security.
  config.peer_tls_ca = absl::GetFlag(FLAGS_peer_tls_ca);
  config.peer_tls_cert = absl::GetFlag(FLAGS_peer_tls_cert);
  config.peer_tls_key = absl::GetFlag(FLAGS_peer_tls_key);
  config.peer_plaintext = absl::GetFlag(FLAGS_peer_plaintext);
  if (auto plane = kolo::daemon::ResolvePeerPlane(config); !plane.ok()) {
    return Fail(std::string(plane.status().message()));
  }
  if (absl::GetFlag(FLAGS_response_cache) < 0) return Fail("--response_cache must be >= 0");
  config.response_cache_capacity = static_cast<uint32_t>(absl::GetFlag(FLAGS_response_cache));
  config.direct_ready = absl::GetFlag(FLAGS_direct_ready);
  for (auto [flag, field, name] :
       {std::tuple{&FLAGS_stall_warning_s, &config.stall_warning, "--stall_warning_s"},
        std::tuple{&FLAGS_stall_timeout_s, &config.stall_timeout, "--stall_timeout_s"},
        std::tuple{&FLAGS_peer_timeout_s, &config.peer_timeout, "--peer_timeout_s"},
        std::tuple{&FLAGS_transfer_timeout_s, &config.transfer_timeout, "--transfer_timeout_s"},
        std::tuple{&FLAGS_nccl_init_timeout_s, &config.nccl_init_timeout, "--nccl_init_timeout_s"},
        std::tuple{&FLAGS_nccl_timeout_s, &config.nccl_timeout, "--nccl_timeout_s"}}) {
    std::string v = absl::GetFlag(*flag);
    if (v.empty()) continue;
    auto d = kolo::daemon::ParseSeconds(v);
    if (!d.ok()) return Fail(std::string(name) + ": " + std::string(d.status().message()));
    *field = *d;
  }
  if (config.stall_warning <= absl::ZeroDuration()) {
    return Fail("--stall_warning_s must be > 0");
  }
  if (config.nccl_init_timeout <= absl::ZeroDuration() ||
      config.nccl_timeout <= absl::ZeroDuration()) {
    return Fail("--nccl_init_timeout_s and --nccl_timeout_s must be > 0");
  }
  for (auto [flag, field, name] :
       {std::tuple{&FLAGS_max_job_ranks, &config.max_job_ranks, "--max_job_ranks"},
        std::tuple{&FLAGS_max_sessions, &config.max_sessions, "--max_sessions"},
        std::tuple{&FLAGS_max_sessions_per_uid, &config.max_sessions_per_uid,
                   "--max_sessions_per_uid"},
        std::tuple{&FLAGS_max_pending_per_rank, &config.max_pending_per_rank,
                   "--max_pending_per_rank"},
        std::tuple{&FLAGS_max_anonymous_calls, &config.max_anonymous_calls,
                   "--max_anonymous_calls"},
        std::tuple{&FLAGS_max_handoffs_per_uid, &config.max_handoffs_per_uid,
                   "--max_handoffs_per_uid"},
        std::tuple{&FLAGS_max_status_calls_per_address, &config.max_status_calls_per_address,
                   "--max_status_calls_per_address"}}) {
    int v = absl::GetFlag(*flag);
    if (v < 1 || v > (1 << 20)) return Fail(std::string(name) + " must lie in [1, 1048576]");
    *field = v;
  }
  {
    auto d = kolo::daemon::ParseSeconds(absl::GetFlag(FLAGS_attach_timeout_s));
    if (!d.ok() || *d <= absl::ZeroDuration()) {
      return Fail("--attach_timeout_s wants a number of seconds > 0");
    }
    config.attach_timeout = *d;
  }
  {
    auto d = kolo::daemon::ParseSeconds(absl::GetFlag(FLAGS_anonymous_call_deadline_s));
    if (!d.ok() || *d <= absl::ZeroDuration()) {
      return Fail("--anonymous_call_deadline_s wants a number of seconds > 0");
    }
    config.anonymous_call_deadline = *d;
  }
  for (auto [flag, field, name] :
       {std::tuple{&FLAGS_elastic_timeout_s, &config.elastic_timeout, "--elastic_timeout_s"},
        std::tuple{&FLAGS_elastic_rejoin_grace_s, &config.elastic_rejoin_grace,
                   "--elastic_rejoin_grace_s"}}) {
    auto d = kolo::daemon::ParseSeconds(absl::GetFlag(*flag));
    if (!d.ok() || *d <= absl::ZeroDuration()) {
      return Fail(std::string(name) + " wants a number of seconds > 0");
    }
    *field = *d;
  }
  config.allow_weak_job_tokens = absl::GetFlag(FLAGS_allow_weak_job_tokens);
  config.caller_memory = absl::GetFlag(FLAGS_caller_memory);
  if (!absl::GetFlag(FLAGS_log_level).empty()) {
    config.log_level = absl::GetFlag(FLAGS_log_level);
  }
  spdlog::level::level_enum level = spdlog::level::from_str(config.log_level);
  if (level == spdlog::level::off && config.log_level != "off") {
    return Fail("unknown log level " + config.log_level);
  }
  spdlog::set_level(level);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ kolod: %v");

  // Signals are taken synchronously by this thread; every other thread
  // inherits the blocked mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // kolod has no controlling terminal to lose; a hang-up (or a terminal a
  // client managed to hand over) never stops it.
  signal(SIGHUP, SIG_IGN);

  if (config.allow_weak_job_tokens) {
    spdlog::warn(
        "--allow_weak_job_tokens: jobs may use tokens under 128 bits; give this flag "
        "only on a node with a single user");
  }
  auto daemon = kolo::daemon::Daemon::Start(config);
  if (!daemon.ok()) return Fail(daemon.status().ToString());

  const int idle_s = absl::GetFlag(FLAGS_exit_when_idle_s);
  if (idle_s < 0) return Fail("--exit_when_idle_s wants a number of seconds >= 0");
  int sig = 0;
  if (idle_s == 0) {
    sigwait(&signals, &sig);
    spdlog::info("signal {}: shutting down", sig);
  } else {
    // Wakes once a second to look for jobs; the idle time restarts whenever
    // one is running.
    int idle = 0;
    const timespec second{1, 0};
    while ((sig = sigtimedwait(&signals, nullptr, &second)) < 0) {
      idle = (*daemon)->job_count() > 0 ? 0 : idle + 1;
      if (idle >= idle_s) break;
    }
    if (sig > 0) {
      spdlog::info("signal {}: shutting down", sig);
    } else {
      spdlog::info("no job for {} s (--exit_when_idle_s): shutting down", idle_s);
    }
  }
  (*daemon)->Shutdown();
  daemon->reset();
  return 0;
}
