#include "client/kolorun/launcher.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <string_view>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/kolorun/hosts.h"
#include "client/kolorun/job_runner.h"
#include "client/kolorun/remote_shell.h"
#include "client/kolorun/subprocess.h"
#include "common/status_macros.h"

namespace kolo::kolorun {
namespace {

// Replaced in a rank's environment; the rest of kolorun's passes through.
constexpr std::array<const char*, 12> kRankVariables = {
    "KOLO_SOCKET",  "KOLO_JOB_ID",           "KOLO_JOB_TOKEN",        "KOLO_RANK",
    "KOLO_SIZE",    "KOLO_LOCAL_RANK",       "KOLO_LOCAL_SIZE",       "KOLO_COORDINATOR",
    "KOLO_ELASTIC", "KOLO_ELASTIC_MIN_SIZE", "KOLO_ELASTIC_MAX_SIZE", "KOLO_ELASTIC_JOINER"};

absl::Status ValidateCoordinator(const LaunchOptions& options) {
  if (options.peer_port < 1 || options.peer_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--peer_port must lie in [1, 65535], got ", options.peer_port));
  }
  if (!options.coordinator.empty()) {
    const size_t colon = options.coordinator.rfind(':');
    int port = 0;
    if (colon == std::string::npos || colon == 0 ||
        !absl::SimpleAtoi(absl::string_view(options.coordinator).substr(colon + 1), &port) ||
        port < 1 || port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("--coordinator \"", options.coordinator, "\" is not HOST:PORT"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateOptions(const LaunchOptions& options) {
  if (options.num_ranks < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("-np must be at least 1, got ", options.num_ranks));
  }
  if (options.command.empty()) {
    return absl::InvalidArgumentError(
        "no command to run: usage is kolorun -np N [flags] -- CMD [ARGS...]");
  }
  if (options.socket_path.empty()) {
    return absl::InvalidArgumentError("the kolod socket path is empty");
  }
  if (options.grace < absl::ZeroDuration() || options.kill_grace < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("grace periods must not be negative");
  }
  KOLO_RETURN_IF_ERROR(ValidateElasticOptions(options.num_ranks, options.elastic));
  const bool elastic_across_hosts = options.elastic.enabled && !options.coordinator.empty();
  if (elastic_across_hosts && options.private_daemon) {
    return absl::InvalidArgumentError(
        "--private_daemon cannot serve an elastic job given --coordinator: ranks on other "
        "hosts could not reach a private kolod (it listens on 127.0.0.1 only)");
  }
  if (!options.elastic.discovery_script.empty()) {
    // The hosts are known once the script has run (-H is ignored), and any
    // of them may be another machine.
    KOLO_RETURN_IF_ERROR(ValidateCoordinator(options));
    if (const std::string why = RemoteCommandError(options.command); !why.empty()) {
      return absl::InvalidArgumentError(why);
    }
    return absl::OkStatus();
  }
  if (options.hosts.empty()) {
    if (elastic_across_hosts) KOLO_RETURN_IF_ERROR(ValidateCoordinator(options));
    return absl::OkStatus();
  }

  KOLO_ASSIGN_OR_RETURN(const std::vector<RankPlacement> placements,
                        AssignRanks(options.hosts, options.num_ranks, options.this_host));
  // An elastic job may start joiners on any host of its list.
  const bool spans_hosts =
      HostsUsed(placements) > 1 || (options.elastic.enabled && options.hosts.size() > 1);
  if (spans_hosts && options.private_daemon) {
    return absl::InvalidArgumentError(
        "--private_daemon cannot serve a job spanning hosts: the other hosts "
        "could not reach a private kolod (it listens on 127.0.0.1 only)");
  }
  KOLO_RETURN_IF_ERROR(ValidateCoordinator(options));
  const bool any_remote =
      std::any_of(placements.begin(), placements.end(),
                  [](const RankPlacement& p) { return !p.local; }) ||
      (options.elastic.enabled &&
       std::any_of(options.hosts.begin(), options.hosts.end(), [&options](const HostSlots& h) {
         return !IsThisMachine(h.host, options.this_host);
       }));
  if (any_remote) {
    if (const std::string why = RemoteCommandError(options.command); !why.empty()) {
      return absl::InvalidArgumentError(why);
    }
    if (options.ssh_program.empty()) {
      return absl::InvalidArgumentError("--ssh is empty");
    }
    if (options.remote_socket_path.empty()) {
      return absl::InvalidArgumentError("the kolod socket path for remote hosts is empty");
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> RankEnvironment(const std::vector<std::string>& base_env,
                                         const std::string& socket_path, const std::string& job_id,
                                         const std::string& job_token, int rank, int size) {
  return RankEnvironment(base_env, RankIdentity{.socket_path = socket_path,
                                                .job_id = job_id,
                                                .job_token = job_token,
                                                .coordinator = "",
                                                .rank = rank,
                                                .size = size,
                                                .local_rank = rank,
                                                .local_size = size});
}

std::vector<std::string> RankEnvironment(const std::vector<std::string>& base_env,
                                         const RankIdentity& id) {
  std::vector<std::string> env;
  env.reserve(base_env.size() + kRankVariables.size());
  for (const std::string& entry : base_env) {
    const std::string_view name = std::string_view(entry).substr(0, entry.find('='));
    const bool replaced = std::any_of(kRankVariables.begin(), kRankVariables.end(),
                                      [name](const char* var) { return name == var; });
    if (!replaced) env.push_back(entry);
  }
  env.push_back(absl::StrCat("KOLO_SOCKET=", id.socket_path));
  env.push_back(absl::StrCat("KOLO_JOB_ID=", id.job_id));
  env.push_back(absl::StrCat("KOLO_JOB_TOKEN=", id.job_token));
  env.push_back(absl::StrCat("KOLO_RANK=", id.rank));
  env.push_back(absl::StrCat("KOLO_SIZE=", id.size));
  env.push_back(absl::StrCat("KOLO_LOCAL_RANK=", id.local_rank));
  env.push_back(absl::StrCat("KOLO_LOCAL_SIZE=", id.local_size));
  if (!id.coordinator.empty()) {
    env.push_back(absl::StrCat("KOLO_COORDINATOR=", id.coordinator));
  }
  if (id.elastic) {
    env.push_back("KOLO_ELASTIC=1");
    env.push_back(absl::StrCat("KOLO_ELASTIC_MIN_SIZE=", id.elastic_min_size));
    env.push_back(absl::StrCat("KOLO_ELASTIC_MAX_SIZE=", id.elastic_max_size));
    if (id.joiner) env.push_back("KOLO_ELASTIC_JOINER=1");
  }
  return env;
}

absl::StatusOr<int> RunJob(const LaunchOptions& options) {
  KOLO_RETURN_IF_ERROR(ValidateOptions(options));
  JobRunner runner(options);
  return runner.Run();
}

}  // namespace kolo::kolorun
