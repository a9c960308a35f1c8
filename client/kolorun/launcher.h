// kolorun's launcher: starts the ranks of a job with the Kolo environment,
// on this machine and (with a host list) on other hosts over ssh, a private
// kolod when a single-machine job finds no daemon, and supervises them to the
// end.
//
// The job's life, as RunJob drives it:
//   1. Place the ranks (hosts.h): without a host list all run here; with one,
//      in order over its slots. If some rank runs here, probe
//      options.socket_path; if nothing accepts there (or private_daemon is
//      set) and the job stays on this machine, start a private kolod on a
//      socket in a fresh temporary directory and wait, bounded, until it
//      accepts. A job spanning hosts needs the system kolod of every host
//      (a private one listens on 127.0.0.1 only), so there it is an error.
//   2. Spawn every rank, each in its own process group: a local rank directly,
//      a remote one as `ssh HOST exec env KOLO_...=... CMD...` (remote_shell.h),
//      with KOLO_SOCKET, KOLO_JOB_ID, KOLO_JOB_TOKEN, KOLO_RANK, KOLO_SIZE,
//      KOLO_LOCAL_RANK and KOLO_LOCAL_SIZE (per host) set, and
//      KOLO_COORDINATOR when the job spans hosts. One job id and token serve
//      every rank.
//   3. Copy every line the ranks (and the private kolod) write, prefixed
//      "[R] " (or "[kolod] "), to kolorun's stdout/stderr; forward SIGINT,
//      SIGTERM and SIGHUP to every rank's group (for a remote rank: its ssh,
//      which closes the connection).
//   4. When a rank fails, report it and start shutdown: the others get
//      `grace` to finish, then SIGTERM, then SIGKILL after `kill_grace`.
//      A forwarded signal starts the same shutdown.
//   5. Once every rank is reaped and its output drained, stop the private
//      kolod (SIGTERM, SIGKILL after `daemon_stop_grace`) and remove its
//      directory.
//
// In an elastic job (LaunchOptions::elastic; elastic_options.h) the same
// steps run with these changes:
//   1. With a discovery script the hosts come from its first run (-H is
//      ignored), waiting up to the elastic timeout for --min-np slots, and
//      min(-np, slots) ranks start. Without one, the hosts are -H, or this
//      machine with -np slots. A job whose first host list names one host
//      stays on it (hosts that discovery adds later are ignored) unless
//      --coordinator is given; with it, or with several hosts in that list,
//      the job needs the system kolod and every rank gets KOLO_COORDINATOR.
//   2. Every rank also gets KOLO_ELASTIC=1, KOLO_ELASTIC_MIN_SIZE and
//      KOLO_ELASTIC_MAX_SIZE (0: no bound); KOLO_RANK and the others are
//      hints, since kolod numbers the ranks. A rank started later (a restart
//      or a new slot) is a joiner: KOLO_ELASTIC_JOINER=1, KOLO_RANK the
//      lowest rank no running process holds, KOLO_SIZE the running ranks
//      with it, KOLO_LOCAL_RANK the lowest local rank free on its host.
//   3. The output prefix "[N] " is a launcher serial: the Nth process
//      started, counting from 0 (the initial ranks keep 0 .. -np - 1, so
//      it matches their KOLO_RANK), not the rank kolod assigns.
//   4. A failing rank does not stop the job: ElasticController
//      (elastic_controller.h) decides restarts, blocklisting and joiners,
//      discovery runs every interval, and the ranks of a host that left the
//      list get SIGTERM (SIGKILL after `kill_grace`). A rank exiting 0 makes
//      the job finishing: the others are waited for, and a failure from
//      then on starts the shutdown of step 4, as do a forwarded signal and
//      falling below --min-np (reported as "job ID: N rank(s) remain, fewer
//      than --min-np M"). The private kolod runs until the job ends.
//
// A remote rank is not signalled itself: ssh (without a terminal) cannot
// deliver signals, so ending ssh only closes the connection, and the remote
// rank notices when it next writes output (SIGPIPE) or reads its stdin.
#pragma once

#include <unistd.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/kolod_locator.h"
#include "client/kolorun/elastic_options.h"
#include "client/kolorun/hosts.h"

namespace kolo::kolorun {

inline constexpr char kDefaultSocketPath[] = "/run/kolo/kolod.sock";

using ::kolo::FindKolod;
using ::kolo::KolodLocator;
using ::kolo::SocketAccepts;

struct LaunchOptions {
  int num_ranks = 0;
  std::vector<std::string> command;  // argv of every rank; not empty.
  std::string job_id;                // Empty: a fresh random id.
  std::string socket_path = kDefaultSocketPath;
  bool private_daemon = false;  // Start a private kolod even if one answers.
  KolodLocator kolod;
  std::vector<std::string> kolod_args;  // Extra arguments for a private kolod.
  // Where the private daemon's directory is made; "/tmp" is used instead when
  // the socket path under it would not fit in a sockaddr_un.
  std::string temp_root = "/tmp";
  // The environment every child starts from ("NAME=value"); the KOLO_*
  // variables listed above are replaced, other KOLO_* ones pass through.
  std::vector<std::string> base_env;

  // Hosts (-H). Empty: every rank on this machine, as before host lists.
  std::vector<HostSlots> hosts;
  // This machine's hostname (gethostname), which also names it in `hosts`.
  std::string this_host;
  // KOLO_COORDINATOR of a job spanning hosts: `coordinator` when set, else
  // rank 0's host and `peer_port` (see CoordinatorAddress).
  int peer_port = kDefaultPeerPort;
  std::string coordinator;
  // KOLO_SOCKET on the other hosts, where a system kolod must listen.
  std::string remote_socket_path = kDefaultSocketPath;
  std::string ssh_program = "ssh";
  std::vector<std::string> ssh_args;  // Before the host on ssh's command line.

  // Off unless --min-np, --max-np or --host-discovery-script is given.
  ElasticOptions elastic;

  absl::Duration grace = absl::Seconds(10);
  absl::Duration kill_grace = absl::Seconds(5);
  absl::Duration daemon_start_timeout = absl::Seconds(10);
  absl::Duration daemon_stop_grace = absl::Seconds(5);
  // How long output is still read after the last rank exited, for the pipes
  // that something the rank started keeps open.
  absl::Duration output_drain_timeout = absl::Seconds(2);

  // When set (--output-filename), each rank's stdout and stderr are also
  // written, unprefixed, to <output_dir>/rank.<N>/stdout and .../stderr, N
  // being the [N] of its lines; the folders are made as needed.
  std::string output_dir;

  // Where prefixed rank stdout goes; rank stderr, kolod output and kolorun's
  // own messages go to `stderr_fd`. Not owned.
  int stdout_fd = STDOUT_FILENO;
  int stderr_fd = STDERR_FILENO;
};

absl::Status ValidateOptions(const LaunchOptions& options);

// The KOLO_* values of one rank.
struct RankIdentity {
  std::string socket_path;
  std::string job_id;
  std::string job_token;
  std::string coordinator;  // Empty: KOLO_COORDINATOR is left unset.
  int rank = 0;
  int size = 0;
  int local_rank = 0;
  int local_size = 0;
  // An elastic job's ranks: KOLO_ELASTIC=1 with the bounds, and
  // KOLO_ELASTIC_JOINER=1 for a joiner.
  bool elastic = false;
  int elastic_min_size = 0;
  int elastic_max_size = 0;  // 0: no bound.
  bool joiner = false;
};

// `base_env` with the per-rank KOLO_* variables (KOLO_COORDINATOR and the
// KOLO_ELASTIC* ones too) replaced by `id`'s: a variable `id` does not set is
// removed.
std::vector<std::string> RankEnvironment(const std::vector<std::string>& base_env,
                                         const RankIdentity& id);
// The same for a job on one machine: local rank and size are the global ones.
std::vector<std::string> RankEnvironment(const std::vector<std::string>& base_env,
                                         const std::string& socket_path, const std::string& job_id,
                                         const std::string& job_token, int rank, int size);

// Runs the job to the end (steps 1-5 above) and returns the exit code
// kolorun should exit with: 0 when every rank exited 0, else the first
// failing rank's shell code (its exit status, or 128 + signal), or 128 +
// signal when a signal arrived before the ranks were started. In an elastic
// job failures that were restarted do not count: 0 when the job finished
// without a failure after its first success, else the first failing rank's
// code after that (or after a forwarded signal); a job ended for falling
// below --min-np returns the last failure's code, or 1. An error means
// the job could not be started (no kolod, a command that cannot be run);
// whatever was already started has then been stopped.
//
// Must be called from the process's only thread that does not block SIGINT,
// SIGTERM and SIGHUP (kolorun's main), with SIGCHLD not ignored. While it
// runs those signals are blocked in the calling thread and read from a
// signalfd; the previous mask is restored on return.
absl::StatusOr<int> RunJob(const LaunchOptions& options);

}  // namespace kolo::kolorun
