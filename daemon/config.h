// DaemonConfig: everything kolod is told, parsed once from flags and the
// environment (flags win) and passed down.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kolo::daemon {

struct DaemonConfig {
  std::string socket_path = "/run/kolo/kolod.sock";
  uint32_t socket_mode = 0660;
  uint64_t fusion_threshold_bytes = uint64_t{64} << 20;  // KOLO_FUSION_THRESHOLD
  int worker_threads = 0;                                // 0: one per core, minus the caller
  absl::Duration spin = absl::Microseconds(50);          // KOLO_SPIN_US
  std::string log_level = "info";                        // KOLO_LOG_LEVEL
  uint64_t max_segment_bytes = uint64_t{64} << 30;
  std::string socket_group;  // chgrp of the socket; empty keeps the default
  // Status and Admin over TCP; empty disables. Bound to loopback by default.
  std::string status_address = "127.0.0.1:7370";
  // Prometheus HTTP endpoint; empty disables.
  std::string metrics_address;
  // The admin token; empty means admin.token beside the socket. Created with
  // a fresh random token (mode 0600) when absent.
  std::string admin_token_file;
  // The Peer service (daemons of multi-node jobs) over TCP; empty disables.
  // Bound to loopback by default: a cluster sets this host's address.
  std::string peer_address = "127.0.0.1:7371";
  std::string node_name;                            // default: hostname:peer port
  absl::Duration peer_timeout = absl::Seconds(10);  // KOLO_PEER_TIMEOUT_S
  // How long data transfers with another node may all stay in flight, none
  // completing, before the job fails naming that node (the heartbeats of the
  // Peer plane travel apart and cannot see a stalled data link). 0: never.
  absl::Duration transfer_timeout = absl::Seconds(60);  // KOLO_TRANSFER_TIMEOUT_S
  uint32_t response_cache_capacity = 1024;
  // Cached names of a multi-node job coordinated here negotiate in direct
  // rounds between the nodes (daemon/negotiation/ready_rounds.h).
  bool direct_ready = true;
  absl::Duration stall_warning = absl::Seconds(60);     // KOLO_STALL_WARNING_S
  absl::Duration stall_timeout = absl::ZeroDuration();  // KOLO_STALL_TIMEOUT_S
  // Device tensors: how long joining a job's NCCL communicator may take,
  // and one collective on it, before the communicator is aborted.
  absl::Duration nccl_init_timeout = absl::Seconds(120);  // KOLO_NCCL_INIT_TIMEOUT_S
  absl::Duration nccl_timeout = absl::Seconds(300);       // KOLO_NCCL_TIMEOUT_S

  // Sharing the node: what one client may ask of kolod.
  int max_job_ranks = 65536;
  int max_sessions = 1024;
  int max_sessions_per_uid = 256;
  // Names a rank may have submitted that are not yet planned.
  int max_pending_per_rank = 4096;
  absl::Duration attach_timeout = absl::Seconds(10);  // handoff and AttachRequest
  // gRPC calls that present no credentials (a handoff ticket, the admin
  // token; see daemon/status/call_credentials.h): how long one may stay open
  // before kolod closes it, and how many one identity (a uid on the socket,
  // a source address on the status port) may hold at once.
  absl::Duration anonymous_call_deadline = absl::Seconds(5);
  int max_anonymous_calls = 16;
  // Handoff connections in progress one uid may hold (the total is the
  // attach headroom, 128).
  int max_handoffs_per_uid = 16;
  // Calls of one source address (or of the admin token) on the status port.
  int max_status_calls_per_address = 16;
  // Elastic jobs: how long an attach waits for its epoch, and how long a
  // rank that detached to reset is waited for.
  absl::Duration elastic_timeout = absl::Seconds(600);
  absl::Duration elastic_rejoin_grace = absl::Seconds(10);
  bool allow_weak_job_tokens = false;  // tokens under 128 bits
  // One-node jobs: read and write the ranks' own memory (cross-memory
  // attach) where the kernel allows it, instead of copies through the arena.
  bool caller_memory = true;

  // --- Peer plane security (see ResolvePeerPlane and docs/security.md) ---
  // Mutual TLS between the daemons of multi-node jobs: the three PEM files
  // go together (--peer_tls_ca, --peer_tls_cert, --peer_tls_key).
  std::string peer_tls_ca;    // the CA that signs every daemon's certificate
  std::string peer_tls_cert;  // this daemon's certificate
  std::string peer_tls_key;   // its private key
  // --peer_plaintext: the Peer plane without TLS, an explicit opt-out for
  // trusted networks and tests (logged as a warning at start).
  bool peer_plaintext = false;
};

// How the Peer plane runs, decided once from the config.
enum class PeerPlane {
  kOff,        // no Peer service: multi-node jobs fail to attach, saying why
  kTls,        // mutual TLS
  kPlaintext,  // no TLS (--peer_plaintext)
};

// The peer address kolod listens on when --peer_address is not given.
inline constexpr char kDefaultPeerAddress[] = "127.0.0.1:7371";

// The rule: an empty peer address is off; the TLS files go all together or
// not at all, and not with --peer_plaintext; with them the plane is TLS,
// with --peer_plaintext plaintext; with neither it is off at a loopback
// address (the default), and an error (kolod refuses to start) at any other
// address, which an operator gave to be reached from other hosts.
absl::StatusOr<PeerPlane> ResolvePeerPlane(const DaemonConfig& config);

// Whether HOST:PORT names a loopback host (127.0.0.0/8, ::1, localhost).
bool IsLoopbackAddress(const std::string& host_port);

// Parses a non-negative number of seconds ("60", "2.5").
absl::StatusOr<absl::Duration> ParseSeconds(const std::string& text);

// Parses a byte count such as "67108864", "64M", "64MiB" or "1G".
absl::StatusOr<uint64_t> ParseBytes(const std::string& text);

// Applies the KOLO_* environment to `config` (called before flags apply).
absl::Status ApplyEnvironment(DaemonConfig* config);

}  // namespace kolo::daemon
