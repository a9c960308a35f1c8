// kolorun: starts N ranks of a command attached to kolod, on this machine
// or over ssh on the hosts of -H, and supervises them. See launcher.h for what
// a run does.
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/kolorun/command_line.h"
#include "client/kolorun/elastic_options.h"
#include "client/kolorun/horovod_flags.h"
#include "client/kolorun/hosts.h"
#include "client/kolorun/launcher.h"
#include "client/kolorun/remote_shell.h"

ABSL_FLAG(int, np, 0, "Number of ranks to start (at least 1).");
ABSL_FLAG(std::string, job_id, "",
          "Job id given to the ranks (KOLO_JOB_ID); default: a fresh random "
          "one.");
ABSL_FLAG(std::string, socket, "",
          "kolod's Unix socket (KOLO_SOCKET for the ranks); default: "
          "$KOLO_SOCKET, else /run/kolo/kolod.sock. When nothing accepts "
          "connections there and the job stays on this machine, a private "
          "kolod is started for it. Ranks on other hosts (-H) get this "
          "flag's value, else /run/kolo/kolod.sock ($KOLO_SOCKET describes "
          "this machine only).");
ABSL_FLAG(bool, private_daemon, false,
          "Start a private kolod for this job even if one answers on the "
          "socket.");
ABSL_FLAG(std::string, kolod, "",
          "The kolod binary for a private daemon; default: $KOLO_KOLOD, else "
          "kolod beside kolorun, else ../../daemon/kolod from kolorun's "
          "directory, else kolod in PATH.");
ABSL_FLAG(std::string, kolod_arg, "",
          "An extra argument for a private kolod (after --socket PATH); "
          "repeat the flag for several, e.g. --kolod_arg=--verbose.");
ABSL_FLAG(std::string, H, "",
          "Hosts to run on, as HOST[:SLOTS],... (SLOTS default 1; an IPv6 "
          "literal as [ADDR]:SLOTS). Ranks fill the hosts in order: with "
          "-np 4 -H a:2,b:2, a runs ranks 0-1 and b ranks 2-3; -np may be "
          "less than the slots. localhost, 127.0.0.1, ::1 and this machine's "
          "hostname run here; other hosts over ssh. Same as --hosts.");
ABSL_FLAG(std::string, hosts, "", "Same as -H.");
ABSL_FLAG(int, peer_port, 7371,
          "The kolod peer port: KOLO_COORDINATOR is rank 0's host and this "
          "port when the job spans hosts (this machine's hostname when rank "
          "0's host is given as localhost, 127.0.0.1 or ::1).");
ABSL_FLAG(std::string, coordinator, "",
          "KOLO_COORDINATOR (HOST:PORT, the peer address of kolod on rank 0's "
          "host) for a job spanning hosts, instead of rank 0's host and "
          "--peer_port.");
ABSL_FLAG(std::string, ssh, "ssh",
          "The ssh program that starts remote ranks, run as `ssh -o "
          "BatchMode=yes [--ssh_arg...] HOST exec env KOLO_...=... CMD "
          "ARGS...` with every word quoted for a POSIX login shell.");
ABSL_FLAG(std::string, ssh_arg, "",
          "An extra argument for ssh, before the host; repeat the flag for "
          "several, e.g. --ssh_arg=-p --ssh_arg=2222.");
ABSL_FLAG(std::string, output_filename, "",
          "A folder: each rank's stdout and stderr are also written, unprefixed, "
          "to FOLDER/rank.N/stdout and FOLDER/rank.N/stderr (N as in the [N] "
          "prefix), as with horovodrun (also spelled --output-filename).");
ABSL_FLAG(double, grace_s, 10,
          "When a rank fails, seconds the other ranks get to finish before "
          "they are sent SIGTERM.");
ABSL_FLAG(double, kill_grace_s, 5, "Seconds between SIGTERM and SIGKILL for ranks still running.");
ABSL_FLAG(double, daemon_start_timeout_s, 10,
          "Seconds to wait for a private kolod to accept connections.");
ABSL_FLAG(std::optional<int>, min_np, std::nullopt,
          "Elastic mode: the fewest ranks the job may run with; fewer, and "
          "kolorun ends the job. Default: -np. Giving it, --max_np or "
          "--host_discovery_script turns elastic mode on (also spelled "
          "--min-np).");
ABSL_FLAG(std::optional<int>, max_np, std::nullopt,
          "Elastic mode: the most ranks the job may run with (-np is how many "
          "start). Default: -np without --host_discovery_script, no bound with "
          "it (also spelled --max-np).");
ABSL_FLAG(std::string, host_discovery_script, "",
          "Elastic mode: an executable that prints the usable hosts, one "
          "HOST:SLOTS (or HOST, 1 slot) a line; blank lines and # comments are "
          "ignored. It names the initial hosts (instead of -H) and is run again "
          "every --discovery_interval_s: new slots get new ranks (joiners), "
          "the ranks of a host that is no longer listed are stopped. A run "
          "that fails or takes over 10 s keeps the previous list (also spelled "
          "--host-discovery-script).");
ABSL_FLAG(double, discovery_interval_s, 1, "Elastic mode: seconds between host discovery runs.");
ABSL_FLAG(int, max_failures_per_host, 3,
          "Elastic mode: a failed rank is restarted on its host, as a joiner, "
          "after a back-off of 1 s doubling with each failure there (at most "
          "30 s); a host with this many failures is blocklisted: no more ranks "
          "start there.");
ABSL_FLAG(double, elastic_timeout_s, 600,
          "Elastic mode: seconds to wait, with fewer than --min_np ranks, for "
          "host discovery to bring hosts (at the start, and after losing "
          "ranks) before ending the job.");

namespace kolo::kolorun {
namespace {

constexpr int kUsageExit = 2;
constexpr int kStartFailureExit = 1;

std::string GetEnv(const char* name) {
  const char* value = ::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

std::string SelfExecutable() {
  std::string buf(4096, '\0');
  const ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size());
  if (n <= 0 || static_cast<size_t>(n) >= buf.size()) return "";
  buf.resize(static_cast<size_t>(n));
  return buf;
}

// This machine's hostname, or "" when it cannot be read.
std::string HostName() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "";
  return buf;
}

std::vector<std::string> CurrentEnvironment() {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  return env;
}

// Children inherit descriptors 0-2 by number: make sure each is open, so a
// pipe created later cannot land on one of them.
void EnsureStandardFds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) < 0) ::open("/dev/null", O_RDWR);
  }
}

absl::StatusOr<absl::Duration> Seconds(const char* flag, double s) {
  if (!std::isfinite(s) || s < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " must be a non-negative number, got ", s));
  }
  return absl::Seconds(s);
}

bool IsKolorunFlag(const absl::CommandLineFlag& flag) {
  return absl::EndsWith(flag.Filename(), "client/kolorun/main.cc");
}

// kolorun's own flag names, for the dashed spellings SplitCommandLine takes.
std::vector<std::string> KolorunFlagNames() {
  std::vector<std::string> names;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (IsKolorunFlag(*flag)) names.emplace_back(name);
  }
  return names;
}

// Whether kolorun's flag `name` (or absl's help flag) takes no value.
bool IsBoolFlag(absl::string_view name) {
  if (name == "help" || name == "helpfull" || name == "helpshort" || name == "helppackage" ||
      name == "version" || name == "only_check_args") {
    return true;
  }
  const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  if (flag == nullptr && absl::StartsWith(name, "no")) {
    flag = absl::FindCommandLineFlag(name.substr(2));
  }
  return flag != nullptr && IsKolorunFlag(*flag) && flag->IsOfType<bool>();
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("cannot read it");
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

// `env` with each NAME=VALUE of `overrides` replacing the entry of that name.
void OverrideEnvironment(const std::vector<std::string>& overrides, std::vector<std::string>* env) {
  for (const std::string& entry : overrides) {
    const std::string prefix = entry.substr(0, entry.find('=') + 1);
    env->erase(std::remove_if(env->begin(), env->end(),
                              [&](const std::string& e) { return absl::StartsWith(e, prefix); }),
               env->end());
    env->push_back(entry);
  }
}

int Fail(int code, absl::string_view message) {
  std::fprintf(stderr, "kolorun: %.*s\n", static_cast<int>(message.size()), message.data());
  return code;
}

int Main(int argc, char** argv) {
  EnsureStandardFds();
  // A closed stdout must not kill kolorun; SIGCHLD must not be ignored or the
  // ranks' statuses are lost. Children get default dispositions back.
  ::signal(SIGPIPE, SIG_IGN);
  ::signal(SIGCHLD, SIG_DFL);

  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "client/kolorun/main.cc");
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  absl::SetFlagsUsageConfig(usage);
  absl::SetProgramUsageMessage(
      "kolorun -np N [-H HOST:SLOTS,...] [flags] -- CMD [ARGS...]\n\n"
      "Starts N ranks of CMD with KOLO_SOCKET, KOLO_JOB_ID, KOLO_JOB_TOKEN,\n"
      "KOLO_RANK, KOLO_SIZE, KOLO_LOCAL_RANK and KOLO_LOCAL_SIZE set (and\n"
      "KOLO_COORDINATOR when the job spans hosts), prefixes each line they\n"
      "print with [RANK], forwards SIGINT/SIGTERM/SIGHUP to them, and exits\n"
      "with the first failing rank's status (0 when all succeed).\n\n"
      "Without -H every rank runs on this machine, and a private kolod is\n"
      "started when none answers on --socket.\n\n"
      "With -H, ranks on other hosts are started over ssh, one ssh per rank,\n"
      "non-interactively (BatchMode: keys or an agent, no passwords). Every\n"
      "host must already run the system kolod (socket /run/kolo/kolod.sock\n"
      "or --socket, peer port --peer_port): kolorun starts no daemon there,\n"
      "and none here either when the job spans hosts, since a private kolod\n"
      "is out of the other hosts' reach. The remote login shell must be a\n"
      "POSIX shell, and CMD must exist on every host. Only KOLO_* variables\n"
      "are passed to remote ranks. An ssh exit status of 255 may be ssh's\n"
      "own failure rather than the rank's.\n\n"
      "Limitation: a remote rank is not signalled. Stopping the job (a\n"
      "failed rank, a forwarded signal) sends SIGTERM to its ssh, which\n"
      "closes the connection; without a terminal, the remote rank notices\n"
      "only when it next writes output (SIGPIPE) or reads stdin, so a rank\n"
      "blocked elsewhere can outlive kolorun on its host.\n\n"
      "Elastic mode (--min_np, --max_np or --host_discovery_script, as with\n"
      "horovodrun): a failed rank is restarted on its host as a joiner, hosts\n"
      "with --max_failures_per_host failures are blocklisted, discovered\n"
      "slots get joiners, and the job ends when a rank exits 0 (the others are\n"
      "waited for) or when fewer than --min_np ranks are left. Ranks also get\n"
      "KOLO_ELASTIC=1, KOLO_ELASTIC_MIN_SIZE, KOLO_ELASTIC_MAX_SIZE (0: no\n"
      "bound) and, for a joiner, KOLO_ELASTIC_JOINER=1; kolod assigns the\n"
      "ranks, so the [N] prefix counts processes started (the initial ranks\n"
      "are [0] to [np-1], joiners [np] on). Without -H or a discovery script\n"
      "the job runs here with -np slots.\n\n"
      "Every flag may also be spelled with '-' for '_' (--min-np).\n\n"
      "horovodrun's flags are accepted too (docs/horovodrun.md says what each\n"
      "means here), and, as with horovodrun, the command may start without --\n"
      "at the first word that is neither a flag nor a flag's value.");

  absl::StatusOr<HorovodTranslation> horovod = TranslateHorovodFlags(
      std::vector<std::string>(argv, argv + argc), IsBoolFlag, ReadFile);
  if (!horovod.ok()) return Fail(kUsageExit, horovod.status().message());
  if (horovod->check_build) {
    std::fputs(CheckBuildReport().c_str(), stdout);
    return 0;
  }
  for (const std::string& note : horovod->notes) {
    std::fprintf(stderr, "kolorun: %s\n", note.c_str());
  }
  if (horovod->verbose) {
    std::vector<std::string> words = horovod->env;
    words.insert(words.end(), horovod->argv.begin(), horovod->argv.end());
    const std::string line = absl::StrJoin(
        words, " ", [](std::string* out, const std::string& w) { out->append(ShellQuote(w)); });
    std::fprintf(stderr, "kolorun: running as: %s\n", line.c_str());
  }

  absl::StatusOr<CommandLine> split = SplitCommandLine(horovod->argv, KolorunFlagNames());
  if (!split.ok()) return Fail(kUsageExit, split.status().message());
  std::vector<char*> flag_argv;
  for (std::string& arg : split->flag_args) flag_argv.push_back(arg.data());
  std::vector<char*> positional =
      absl::ParseCommandLine(static_cast<int>(flag_argv.size()), flag_argv.data());

  LaunchOptions options;
  options.num_ranks = absl::GetFlag(FLAGS_np);
  options.command = split->command;
  if (positional.size() > 1) {
    if (!options.command.empty()) {
      return Fail(kUsageExit, absl::StrCat("unexpected argument `", positional[1],
                                           "` before --; usage: kolorun -np N [flags] -- "
                                           "CMD [ARGS...]"));
    }
    options.command.assign(positional.begin() + 1, positional.end());
  }
  options.job_id = absl::GetFlag(FLAGS_job_id);
  options.socket_path = absl::GetFlag(FLAGS_socket);
  if (options.socket_path.empty()) options.socket_path = GetEnv("KOLO_SOCKET");
  if (options.socket_path.empty()) options.socket_path = kDefaultSocketPath;
  options.private_daemon = absl::GetFlag(FLAGS_private_daemon);
  options.kolod = KolodLocator{
      .flag_path = absl::GetFlag(FLAGS_kolod),
      .env_path = GetEnv("KOLO_KOLOD"),
      .self_exe = SelfExecutable(),
      .path_env = GetEnv("PATH"),
  };
  options.kolod_args = split->kolod_args;

  const std::string short_hosts = absl::GetFlag(FLAGS_H);
  const std::string long_hosts = absl::GetFlag(FLAGS_hosts);
  if (!short_hosts.empty() && !long_hosts.empty()) {
    return Fail(kUsageExit, "give -H or --hosts, not both");
  }
  const std::string host_list = short_hosts.empty() ? long_hosts : short_hosts;
  if (!host_list.empty()) {
    absl::StatusOr<std::vector<HostSlots>> hosts = ParseHostList(host_list);
    if (!hosts.ok()) return Fail(kUsageExit, hosts.status().message());
    options.hosts = *std::move(hosts);
  }
  options.this_host = HostName();
  options.peer_port = absl::GetFlag(FLAGS_peer_port);
  options.coordinator = absl::GetFlag(FLAGS_coordinator);
  options.remote_socket_path = absl::GetFlag(FLAGS_socket);
  if (options.remote_socket_path.empty()) {
    options.remote_socket_path = kDefaultSocketPath;
  }
  options.ssh_program = absl::GetFlag(FLAGS_ssh);
  options.ssh_args = split->ssh_args;
  options.output_dir = absl::GetFlag(FLAGS_output_filename);
  options.temp_root = GetEnv("TMPDIR");
  if (options.temp_root.empty()) options.temp_root = "/tmp";
  options.base_env = CurrentEnvironment();
  OverrideEnvironment(horovod->env, &options.base_env);

  const struct {
    const char* name;
    double value;
    absl::Duration* out;
  } durations[] = {
      {"grace_s", absl::GetFlag(FLAGS_grace_s), &options.grace},
      {"kill_grace_s", absl::GetFlag(FLAGS_kill_grace_s), &options.kill_grace},
      {"daemon_start_timeout_s", absl::GetFlag(FLAGS_daemon_start_timeout_s),
       &options.daemon_start_timeout},
  };
  for (const auto& d : durations) {
    absl::StatusOr<absl::Duration> parsed = Seconds(d.name, d.value);
    if (!parsed.ok()) return Fail(kUsageExit, parsed.status().message());
    *d.out = *parsed;
  }
  absl::StatusOr<ElasticOptions> elastic = ElasticOptionsFromFlags(
      options.num_ranks, ElasticFlags{
                             .min_np = absl::GetFlag(FLAGS_min_np),
                             .max_np = absl::GetFlag(FLAGS_max_np),
                             .host_discovery_script = absl::GetFlag(FLAGS_host_discovery_script),
                             .discovery_interval_s = absl::GetFlag(FLAGS_discovery_interval_s),
                             .max_failures_per_host = absl::GetFlag(FLAGS_max_failures_per_host),
                             .elastic_timeout_s = absl::GetFlag(FLAGS_elastic_timeout_s),
                         });
  if (!elastic.ok()) return Fail(kUsageExit, elastic.status().message());
  options.elastic = *std::move(elastic);
  if (absl::Status valid = ValidateOptions(options); !valid.ok()) {
    return Fail(kUsageExit, valid.message());
  }

  absl::StatusOr<int> code = RunJob(options);
  if (!code.ok()) return Fail(kStartFailureExit, code.status().message());
  return *code;
}

}  // namespace
}  // namespace kolo::kolorun

int main(int argc, char** argv) { return kolo::kolorun::Main(argc, argv); }
