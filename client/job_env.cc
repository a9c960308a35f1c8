#include "client/job_env.h"

#include <cmath>
#include <cstdlib>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

extern char** environ;

namespace kolo {
namespace {

// Variables that change nothing here, and why.
struct Noted {
  const char* name;
  const char* why;
};

constexpr const char* kNoCycle =
    "Kolo has no cycle: kolod plans a collective as soon as every rank has submitted it "
    "(HOROVOD_FUSION_THRESHOLD and HOROVOD_AUTOTUNE decide how much is fused)";
constexpr const char* kHierarchical =
    "there is no other mode: ranks reach only their node's kolod, and only the kolods exchange "
    "data between nodes";
constexpr const char* kStall =
    "kolod's stall check is its operator's (kolod --stall_warning_s and --stall_timeout_s; "
    "horovodrun's --stall-check-* flags pass them to a private kolod)";

constexpr Noted kNoted[] = {
    {"HOROVOD_CYCLE_TIME", kNoCycle},
    {"HOROVOD_TIMELINE_MARK_CYCLES", "Kolo has no negotiation cycles to mark"},
    {"HOROVOD_HIERARCHICAL_ALLREDUCE", kHierarchical},
    {"HOROVOD_HIERARCHICAL_ALLGATHER", kHierarchical},
    {"HOROVOD_STALL_CHECK_DISABLE", kStall},
    {"HOROVOD_STALL_CHECK_TIME_SECONDS", kStall},
    {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", kStall},
    {"HOROVOD_NUM_NCCL_STREAMS", "kolod chooses its NCCL streams"},
    {"HOROVOD_BATCH_D2D_MEMCOPIES", "kolod copies device tensors into its fusion buffer itself"},
    {"HOROVOD_ENABLE_ASYNC_COMPLETION", "kolod completes device collectives asynchronously always"},
    {"HOROVOD_DISABLE_GROUP_FUSION",
     "grouped collectives fuse with others under kolod's one fusion rule"},
    {"HOROVOD_DYNAMIC_PROCESS_SETS", "not needed: add_process_set works at any time"},
    {"HOROVOD_MPI_THREADS_DISABLE", "Kolo uses no MPI"},
    {"HOROVOD_GLOO_TIMEOUT_SECONDS", "Kolo uses no Gloo"},
    {"HOROVOD_CCL_BGT_AFFINITY", "Kolo has no oneCCL backend"},
    {"HOROVOD_THREAD_AFFINITY", "kolod's threads are its operator's to place"},
    {"HOROVOD_ADASUM_MPI_CHUNK_SIZE", "Kolo's Adasum moves data over kolod's own transport"},
    {"HOROVOD_ENABLE_XLA_OPS", "kolo.tensorflow registers no XLA ops"},
    {"HOROVOD_LOG_LEVEL",
     "libkolo reports errors as statuses and logs nothing else; kolod's log level is its "
     "operator's (kolod --log_level)"},
    {"HOROVOD_LOG_HIDE_TIME", "libkolo logs nothing but these notes"},
};

// Read elsewhere (the Python modules, the launchers), not by libkolo.
constexpr const char* kReadElsewhere[] = {
    "HOROVOD_TIMELINE",  // kolo.tensorflow and kolo.torch init()
};

// Operations of a build of Horovod's: where Kolo runs them instead.
struct Operations {
  const char* name;
  const char* kolo_runs;  // the value that needs no note
  const char* why;
};

constexpr const char* kGpuWhy = "kolod runs collectives over device tensors on NCCL";
constexpr const char* kCpuWhy = "kolod runs collectives over host tensors itself";

constexpr Operations kOperations[] = {
    {"HOROVOD_GPU_OPERATIONS", "NCCL", kGpuWhy},
    {"HOROVOD_GPU_ALLREDUCE", "NCCL", kGpuWhy},
    {"HOROVOD_GPU_ALLGATHER", "NCCL", kGpuWhy},
    {"HOROVOD_GPU_BROADCAST", "NCCL", kGpuWhy},
    {"HOROVOD_GPU_ALLTOALL", "NCCL", kGpuWhy},
    {"HOROVOD_GPU_REDUCESCATTER", "NCCL", kGpuWhy},
    {"HOROVOD_CPU_OPERATIONS", "", kCpuWhy},
    {"HOROVOD_CONTROLLER", "", "kolod is the controller: it negotiates every collective"},
};

constexpr const char* kOperationValues[] = {"NCCL", "MPI", "GLOO", "DDL", "CCL"};

// The variable of a setting: KOLO_<x> wins over HOROVOD_<x>.
struct Found {
  std::string name;
  std::string value;
  bool set = false;
};

Found Lookup(const char* kolo, const char* horovod) {
  for (const char* name : {kolo, horovod}) {
    if (name == nullptr) continue;
    if (const char* v = std::getenv(name); v != nullptr && *v) return {name, v, true};
  }
  return {};
}

absl::Status Bad(const Found& f, const char* want) {
  return absl::InvalidArgumentError(absl::StrCat(f.name, "=\"", f.value, "\": want ", want));
}

// A byte count with an optional K, M or G suffix (powers of 1024).
bool ParseBytes(absl::string_view v, uint64_t* out) {
  uint64_t scale = 1;
  if (!v.empty()) {
    switch (absl::ascii_toupper(v.back())) {
      case 'K':
        scale = uint64_t{1} << 10;
        break;
      case 'M':
        scale = uint64_t{1} << 20;
        break;
      case 'G':
        scale = uint64_t{1} << 30;
        break;
      default:
        break;
    }
    if (scale != 1) v.remove_suffix(1);
  }
  uint64_t n = 0;
  if (!absl::SimpleAtoi(v, &n) || n > (uint64_t{1} << 50) / scale) return false;
  *out = n * scale;
  return true;
}

absl::Status ReadCount(const char* kolo, const char* horovod, uint32_t lo, uint32_t hi,
                       uint32_t* out) {
  const Found f = Lookup(kolo, horovod);
  if (!f.set) return absl::OkStatus();
  uint32_t n = 0;
  if (!absl::SimpleAtoi(f.value, &n) || n < lo || n > hi) {
    return Bad(f, absl::StrCat("an integer in ", lo, "..", hi).c_str());
  }
  *out = n;
  return absl::OkStatus();
}

absl::Status ReadBool(const Found& f, bool* out) {
  const std::string v = absl::AsciiStrToLower(f.value);
  if (v == "1" || v == "true" || v == "yes" || v == "on") {
    *out = true;
  } else if (v == "0" || v == "false" || v == "no" || v == "off") {
    *out = false;
  } else {
    return Bad(f, "0 or 1");
  }
  return absl::OkStatus();
}

bool Known(absl::string_view name) {
  static constexpr const char* kMapped[] = {
      "HOROVOD_FUSION_THRESHOLD",
      "HOROVOD_CACHE_CAPACITY",
      "HOROVOD_AUTOTUNE",
      "HOROVOD_AUTOTUNE_LOG",
      "HOROVOD_AUTOTUNE_WARMUP_SAMPLES",
      "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE",
      "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES",
      "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE",
  };
  for (const char* n : kMapped) {
    if (name == n) return true;
  }
  for (const Noted& n : kNoted) {
    if (name == n.name) return true;
  }
  for (const char* n : kReadElsewhere) {
    if (name == n) return true;
  }
  for (const Operations& n : kOperations) {
    if (name == n.name) return true;
  }
  return false;
}

absl::Status ReadOperations(ClientOptions* o) {
  for (const Operations& op : kOperations) {
    const Found f = Lookup(nullptr, op.name);
    if (!f.set) continue;
    const std::string v = absl::AsciiStrToUpper(f.value);
    bool valid = false;
    for (const char* value : kOperationValues) valid = valid || v == value;
    if (!valid) return Bad(f, "NCCL, MPI, GLOO, DDL or CCL");
    if (v != op.kolo_runs) {
      o->env_notes.push_back(
          absl::StrCat(f.name, "=", f.value, ": changes nothing here: ", op.why));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ApplyJobEnvironment(ClientOptions* o) {
  ClientOptions::JobSettings& job = o->job;
  if (Found f = Lookup("KOLO_FUSION_THRESHOLD", "HOROVOD_FUSION_THRESHOLD"); f.set) {
    uint64_t bytes = 0;
    if (!ParseBytes(f.value, &bytes)) return Bad(f, "a byte count (0: no fusion; K, M, G)");
    job.fusion_threshold_bytes = bytes;
  }
  if (Found f = Lookup("KOLO_CACHE_CAPACITY", "HOROVOD_CACHE_CAPACITY"); f.set) {
    uint32_t n = 0;
    if (!absl::SimpleAtoi(f.value, &n)) return Bad(f, "a count of names (0: no cache)");
    job.cache_capacity = n;
  }
  if (Found f = Lookup("KOLO_AUTOTUNE", "HOROVOD_AUTOTUNE"); f.set) {
    if (absl::Status s = ReadBool(f, &job.autotune); !s.ok()) return s;
  }
  if (Found f = Lookup("KOLO_AUTOTUNE_LOG", "HOROVOD_AUTOTUNE_LOG"); f.set) {
    job.autotune_log = f.value;
  }
  if (absl::Status s = ReadCount("KOLO_AUTOTUNE_WARMUP_SAMPLES", "HOROVOD_AUTOTUNE_WARMUP_SAMPLES",
                                 0, 100, &job.autotune_warmup_samples);
      !s.ok())
    return s;
  if (absl::Status s =
          ReadCount("KOLO_AUTOTUNE_STEPS_PER_SAMPLE", "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", 1, 10000,
                    &job.autotune_steps_per_sample);
      !s.ok())
    return s;
  if (absl::Status s =
          ReadCount("KOLO_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES",
                    1, 1000, &job.autotune_max_samples);
      !s.ok())
    return s;
  if (Found f =
          Lookup("KOLO_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE");
      f.set) {
    double noise = 0;
    if (!absl::SimpleAtod(f.value, &noise) || !std::isfinite(noise) || noise <= 0 || noise > 100) {
      return Bad(f, "a number in (0, 100]");
    }
    job.autotune_noise = noise;
  }
  if (!job.autotune && (!job.autotune_log.empty() || job.autotune_warmup_samples != 0 ||
                        job.autotune_steps_per_sample != 0 || job.autotune_max_samples != 0 ||
                        job.autotune_noise != 0)) {
    o->env_notes.push_back(
        "the autotune settings change nothing without HOROVOD_AUTOTUNE=1 (or KOLO_AUTOTUNE=1)");
  }
  for (const Noted& n : kNoted) {
    if (const char* v = std::getenv(n.name); v != nullptr) {
      o->env_notes.push_back(absl::StrCat(n.name, "=", v, ": changes nothing here: ", n.why));
    }
  }
  if (absl::Status s = ReadOperations(o); !s.ok()) return s;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const absl::string_view entry(*e);
    if (!absl::StartsWith(entry, "HOROVOD_")) continue;
    const absl::string_view name = entry.substr(0, entry.find('='));
    if (!Known(name)) {
      o->env_notes.push_back(absl::StrCat(
          name, ": not a Horovod setting Kolo knows (docs/horovod_env.md): it changes nothing"));
    }
  }
  return absl::OkStatus();
}

}  // namespace kolo
