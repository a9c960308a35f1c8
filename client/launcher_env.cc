#include "client/launcher_env.h"

#include <cstdlib>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace kolo {
namespace {

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

absl::Status EnvInt(const char* name, int* out) {
  const char* v = Env(name);
  if (v == nullptr) return absl::OkStatus();
  if (!absl::SimpleAtoi(v, out)) {
    return absl::InvalidArgumentError(absl::StrCat(name, "=\"", v, "\" is not an integer"));
  }
  return absl::OkStatus();
}

absl::Status ReadInts(std::initializer_list<std::pair<const char*, int*>> fields) {
  for (auto [name, field] : fields) {
    if (absl::Status s = EnvInt(name, field); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ApplyOpenMpi(ClientOptions* o) {
  if (absl::Status s = ReadInts({{"OMPI_COMM_WORLD_RANK", &o->rank},
                                 {"OMPI_COMM_WORLD_SIZE", &o->size},
                                 {"OMPI_COMM_WORLD_LOCAL_RANK", &o->local_rank},
                                 {"OMPI_COMM_WORLD_LOCAL_SIZE", &o->local_size}});
      !s.ok()) {
    return s;
  }
  if (const char* j = Env("OMPI_MCA_ess_base_jobid")) o->job_id = absl::StrCat("ompi-", j);
  return absl::OkStatus();
}

absl::Status ApplySlurm(ClientOptions* o) {
  if (absl::Status s = ReadInts({{"SLURM_PROCID", &o->rank},
                                 {"SLURM_NTASKS", &o->size},
                                 {"SLURM_LOCALID", &o->local_rank}});
      !s.ok()) {
    return s;
  }
  // "2(x3),1": tasks on each node; this node's count is the leading one
  // only when all are equal, so take the node's own SLURM_NTASKS_PER_NODE
  // if set, else the first entry.
  const char* per_node = Env("SLURM_NTASKS_PER_NODE");
  if (per_node == nullptr) per_node = Env("SLURM_STEP_TASKS_PER_NODE");
  if (per_node != nullptr) o->local_size = std::atoi(per_node);
  if (const char* j = Env("SLURM_JOB_ID")) {
    const char* step = Env("SLURM_STEP_ID");
    o->job_id = absl::StrCat("slurm-", j, ".", step ? step : "0");
  }
  return absl::OkStatus();
}

absl::Status ApplyTorchrun(ClientOptions* o) {
  o->local_size = 1;
  if (absl::Status s = ReadInts({{"RANK", &o->rank},
                                 {"WORLD_SIZE", &o->size},
                                 {"LOCAL_RANK", &o->local_rank},
                                 {"LOCAL_WORLD_SIZE", &o->local_size}});
      !s.ok()) {
    return s;
  }
  const char* addr = Env("MASTER_ADDR");
  const char* port = Env("MASTER_PORT");
  const char* run = Env("TORCHELASTIC_RUN_ID");
  if (run != nullptr && std::string_view(run) != "none") {
    const char* restart = Env("TORCHELASTIC_RESTART_COUNT");
    o->job_id = absl::StrCat("torch-", run, ".", restart ? restart : "0");
  } else if (addr != nullptr && port != nullptr) {
    o->job_id = absl::StrCat("torch-", addr, ":", port);
  }
  if (o->size > o->local_size && addr != nullptr) {
    int peer_port = kDefaultPeerPort;
    if (absl::Status s = EnvInt("KOLO_PEER_PORT", &peer_port); !s.ok()) return s;
    if (peer_port < 1 || peer_port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("KOLO_PEER_PORT=", peer_port, ": want a port in 1..65535"));
    }
    const absl::string_view host(addr);
    const bool bare_v6 = absl::StrContains(host, ':') && !absl::StartsWith(host, "[");
    o->coordinator =
        bare_v6 ? absl::StrCat("[", host, "]:", peer_port) : absl::StrCat(host, ":", peer_port);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Launcher> ApplyLauncherEnvironment(ClientOptions* o) {
  if (std::getenv("KOLO_RANK") != nullptr) return Launcher::kNone;
  Launcher launcher = Launcher::kNone;
  absl::Status s;
  if (std::getenv("OMPI_COMM_WORLD_RANK") != nullptr) {
    launcher = Launcher::kOpenMpi;
    s = ApplyOpenMpi(o);
  } else if (std::getenv("SLURM_PROCID") != nullptr) {
    launcher = Launcher::kSlurm;
    s = ApplySlurm(o);
  } else if (std::getenv("RANK") != nullptr && std::getenv("WORLD_SIZE") != nullptr) {
    launcher = Launcher::kTorchrun;
    s = ApplyTorchrun(o);
  }
  if (!s.ok()) return s;
  return launcher;
}

}  // namespace kolo
