#include "client/kolorun/horovod_flags.h"

#include <algorithm>
#include <iterator>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/types/span.h"
#include "client/kolorun/nccl_version.h"

namespace kolo::kolorun {
namespace {

// horovodrun's flags that take no value.
constexpr absl::string_view kHorovodBoolFlags[] = {
    "verbose",        "timeline_mark_cycles", "hierarchical_allreduce", "hierarchical_allgather",
    "autotune",       "no_stall_check",       "gloo",                   "mpi",
    "check_build",
};

// horovodrun's flags that take a value (with '_' for '-').
constexpr absl::string_view kHorovodValueFlags[] = {
    "num_proc",
    "hostfile",
    "p",
    "ssh_port",
    "i",
    "ssh_identity_file",
    "start_timeout",
    "network_interface",
    "log_level",
    "timeline_filename",
    "fusion_threshold_mb",
    "cycle_time_ms",
    "cache_capacity",
    "autotune_log_file",
    "autotune_warmup_samples",
    "autotune_steps_per_sample",
    "autotune_bayes_opt_max_samples",
    "autotune_gaussian_process_noise",
    "stall_check_warning_time_seconds",
    "stall_check_shutdown_time_seconds",
    "config_file",
};

bool Contains(absl::Span<const absl::string_view> names, absl::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// A non-negative number of seconds, as kolod's --*_s flags take it.
absl::Status CheckSeconds(absl::string_view flag, const std::string& value) {
  double s = 0;
  if (!absl::SimpleAtod(value, &s) || !(s >= 0) || s > 1e9) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " wants a number of seconds >= 0, got \"", value, "\""));
  }
  return absl::OkStatus();
}

absl::Status CheckCount(absl::string_view flag, const std::string& value, int64_t max,
                        int64_t min = 0) {
  int64_t n = 0;
  if (!absl::SimpleAtoi(value, &n) || n < min || n > max) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, " wants a whole number in [", min,
                                                   ", ", max, "], got \"", value, "\""));
  }
  return absl::OkStatus();
}

// horovodrun's --autotune-* knobs that take a count: the variable each sets
// (the SDK reads it, client/job_env.cc) and the range it takes there.
struct AutotuneCount {
  absl::string_view name;
  absl::string_view variable;
  int64_t min, max;
};
constexpr AutotuneCount kAutotuneCounts[] = {
    {"autotune_warmup_samples", "KOLO_AUTOTUNE_WARMUP_SAMPLES", 0, 100},
    {"autotune_steps_per_sample", "KOLO_AUTOTUNE_STEPS_PER_SAMPLE", 1, 10000},
    {"autotune_bayes_opt_max_samples", "KOLO_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", 1, 1000},
};

// kolod's default --response_cache.
constexpr int64_t kKolodResponseCache = 1024;

// Horovod's log level (TRACE, DEBUG, INFO, WARNING, ERROR, FATAL) as kolod's.
absl::StatusOr<std::string> KolodLogLevel(const std::string& value) {
  const std::string level = absl::AsciiStrToLower(value);
  if (level == "trace" || level == "debug" || level == "info" || level == "error") return level;
  if (level == "warning" || level == "warn") return std::string("warn");
  if (level == "fatal") return std::string("error");
  return absl::InvalidArgumentError(absl::StrCat(
      "--log-level wants TRACE, DEBUG, INFO, WARNING, ERROR or FATAL, got \"", value, "\""));
}

constexpr absl::string_view kPrivateOnly =
    " (kolod's flag: it applies to the private kolod kolorun starts; a kolod already "
    "running keeps its own setting)";

}  // namespace

absl::StatusOr<std::string> HostfileToHostList(absl::string_view contents) {
  std::vector<std::string> hosts;
  for (absl::string_view line : absl::StrSplit(contents, '\n')) {
    line = line.substr(0, line.find('#'));
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    std::vector<absl::string_view> words =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    std::string host(words[0]);
    if (words.size() == 1) {
      hosts.push_back(host);
      continue;
    }
    absl::string_view slots = words[1];
    int n = 0;
    if (words.size() != 2 || !absl::ConsumePrefix(&slots, "slots=") || !absl::SimpleAtoi(slots, &n) ||
        n < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("hostfile line \"", line, "\": want HOST slots=N, HOST:N or HOST"));
    }
    hosts.push_back(absl::StrCat(host, ":", n));
  }
  if (hosts.empty()) return absl::InvalidArgumentError("the hostfile names no host");
  return absl::StrJoin(hosts, ",");
}

absl::StatusOr<HorovodTranslation> TranslateHorovodFlags(
    const std::vector<std::string>& argv, const std::function<bool(absl::string_view)>& is_bool_flag,
    const std::function<absl::StatusOr<std::string>(const std::string&)>& read_file) {
  HorovodTranslation out;
  size_t i = 0;
  if (!argv.empty()) out.argv.push_back(argv[i++]);
  bool autotune = false;
  std::optional<std::string> autotune_knob;  // the first --autotune-* flag given
  for (; i < argv.size(); ++i) {
    const std::string& word = argv[i];
    absl::string_view rest = word;
    if (word == "--" || word == "-" ||
        (!absl::ConsumePrefix(&rest, "--") && !absl::ConsumePrefix(&rest, "-"))) {
      // The command: horovodrun takes everything from here verbatim.
      out.argv.push_back("--");
      out.argv.insert(out.argv.end(), argv.begin() + static_cast<std::ptrdiff_t>(i) +
                                          (word == "--" ? 1 : 0),
                      argv.end());
      break;
    }
    const size_t eq = rest.find('=');
    std::string name(rest.substr(0, eq));
    std::replace(name.begin(), name.end(), '-', '_');
    const bool inline_value = eq != absl::string_view::npos;

    if (Contains(kHorovodBoolFlags, name)) {
      if (inline_value) {
        return absl::InvalidArgumentError(absl::StrCat(word, ": --", name, " takes no value"));
      }
      if (name == "verbose") {
        out.verbose = true;
      } else if (name == "check_build") {
        out.check_build = true;
      } else if (name == "timeline_mark_cycles") {
        out.notes.push_back(
            "--timeline-mark-cycles: Kolo has no negotiation cycles to mark; the timeline "
            "(--timeline-filename) shows each collective's phases without cycle markers");
      } else if (name == "hierarchical_allreduce" || name == "hierarchical_allgather") {
        out.notes.push_back(absl::StrCat(
            "--", absl::StrReplaceAll(name, {{"_", "-"}}),
            ": there is no other mode to select: every rank's collectives go through its "
            "node's kolod, and only the kolods exchange data between nodes"));
      } else if (name == "autotune") {
        autotune = true;
        out.env.push_back("KOLO_AUTOTUNE=1");
      } else if (name == "no_stall_check") {
        out.argv.push_back("--kolod_arg=--stall_warning_s=1000000000");
        out.argv.push_back("--kolod_arg=--stall_timeout_s=0");
        out.notes.push_back(absl::StrCat("--no-stall-check: no stall warnings or shutdown",
                                         kPrivateOnly));
      } else if (name == "gloo" || name == "mpi") {
        out.notes.push_back(absl::StrCat(
            "--", name, ": Kolo has one controller, kolod; kolorun starts the ranks itself "
            "(over ssh for other hosts), with neither ", name == "mpi" ? "mpirun" : "Gloo",
            " nor any other backend to choose"));
      }
      continue;
    }
    if (!Contains(kHorovodValueFlags, name)) {
      // One of kolorun's own flags (or an unknown one, which the flag parser
      // refuses): keep it, and its value when it takes one.
      out.argv.push_back(word);
      if (!inline_value && i + 1 < argv.size() && argv[i + 1] != "--") {
        std::string underscored(name);
        if (!is_bool_flag(underscored)) out.argv.push_back(argv[++i]);
      }
      continue;
    }
    std::string value;
    if (inline_value) {
      value = std::string(rest.substr(eq + 1));
    } else if (i + 1 < argv.size() && argv[i + 1] != "--") {
      value = argv[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat(word, " needs a value"));
    }

    if (name == "num_proc") {
      out.argv.push_back(absl::StrCat("--np=", value));
    } else if (name == "hostfile") {
      absl::StatusOr<std::string> contents = read_file(value);
      if (!contents.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--hostfile ", value, ": ", contents.status().message()));
      }
      absl::StatusOr<std::string> hosts = HostfileToHostList(*contents);
      if (!hosts.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--hostfile ", value, ": ", hosts.status().message()));
      }
      out.argv.push_back(absl::StrCat("--hosts=", *hosts));
    } else if (name == "p" || name == "ssh_port") {
      if (absl::Status s = CheckCount("ssh-port", value, 65535); !s.ok()) return s;
      out.argv.push_back("--ssh_arg=-p");
      out.argv.push_back(absl::StrCat("--ssh_arg=", value));
    } else if (name == "i" || name == "ssh_identity_file") {
      out.argv.push_back("--ssh_arg=-i");
      out.argv.push_back(absl::StrCat("--ssh_arg=", value));
    } else if (name == "start_timeout") {
      if (absl::Status s = CheckSeconds("start-timeout", value); !s.ok()) return s;
      out.argv.push_back(absl::StrCat("--daemon_start_timeout_s=", value));
      out.notes.push_back(absl::StrCat(
          "--start-timeout ", value,
          ": kolorun waits this long for a private kolod to accept connections; ranks are "
          "started without a further deadline, and each waits for the others in init()"));
    } else if (name == "network_interface") {
      out.notes.push_back(absl::StrCat(
          "--network-interface ", value,
          ": changes nothing here: ranks talk only to their node's kolod over its Unix socket; "
          "between nodes the kolods move data over UCX and NCCL, whose interfaces are set in "
          "each kolod's environment where it runs (UCX_NET_DEVICES, NCCL_SOCKET_IFNAME)"));
    } else if (name == "log_level") {
      absl::StatusOr<std::string> level = KolodLogLevel(value);
      if (!level.ok()) return level.status();
      out.argv.push_back(absl::StrCat("--kolod_arg=--log_level=", *level));
      out.notes.push_back(absl::StrCat("--log-level ", value, ": kolod --log_level=", *level,
                                       kPrivateOnly));
    } else if (name == "timeline_filename") {
      out.env.push_back(absl::StrCat("KOLO_TIMELINE=", value));
    } else if (name == "fusion_threshold_mb") {
      if (absl::Status s = CheckCount("fusion-threshold-mb", value, 1 << 20); !s.ok()) return s;
      int64_t mb = 0;
      (void)absl::SimpleAtoi(value, &mb);
      const std::string bytes = absl::StrCat(mb << 20);
      out.env.push_back(absl::StrCat("KOLO_FUSION_THRESHOLD=", bytes));
      out.notes.push_back(absl::StrCat(
          "--fusion-threshold-mb ", value, ": the job's fusion threshold (KOLO_FUSION_THRESHOLD=",
          bytes, " for every rank), at most each kolod's --fusion_threshold (default 64M); the "
          "private kolod kolorun starts reads the same variable as its bound, a kolod already "
          "running keeps its own"));
    } else if (name == "cycle_time_ms") {
      out.notes.push_back(absl::StrCat(
          "--cycle-time-ms ", value,
          ": changes nothing here: Kolo has no cycle; kolod plans a collective as soon as every "
          "rank has submitted it, fusing what is ready together (--autotune tunes the fusion "
          "threshold instead)"));
    } else if (name == "cache_capacity") {
      if (absl::Status s = CheckCount("cache-capacity", value, 1 << 30); !s.ok()) return s;
      out.env.push_back(absl::StrCat("KOLO_CACHE_CAPACITY=", value));
      int64_t n = 0;
      (void)absl::SimpleAtoi(value, &n);
      const bool raise = n > kKolodResponseCache;
      if (raise) out.argv.push_back(absl::StrCat("--kolod_arg=--response_cache=", value));
      out.notes.push_back(absl::StrCat(
          "--cache-capacity ", value, ": the job's response cache (KOLO_CACHE_CAPACITY=", value,
          " for every rank), at most each kolod's --response_cache (default ",
          kKolodResponseCache, ")",
          raise ? absl::StrCat("; the private kolod kolorun starts gets --response_cache=", value,
                               ", a kolod already running keeps its own")
                : "; the private kolod kolorun starts keeps its default"));
    } else if (name == "autotune_log_file") {
      out.env.push_back(absl::StrCat("KOLO_AUTOTUNE_LOG=", value));
      if (!autotune_knob) autotune_knob = "--autotune-log-file";
    } else if (name == "autotune_gaussian_process_noise") {
      double noise = 0;
      if (!absl::SimpleAtod(value, &noise) || !(noise > 0) || noise > 100) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--autotune-gaussian-process-noise wants a number in (0, 100], got \"", value, "\""));
      }
      out.env.push_back(absl::StrCat("KOLO_AUTOTUNE_GAUSSIAN_PROCESS_NOISE=", value));
      if (!autotune_knob) autotune_knob = "--autotune-gaussian-process-noise";
    } else if (auto knob = std::find_if(std::begin(kAutotuneCounts), std::end(kAutotuneCounts),
                                        [&](const AutotuneCount& k) { return k.name == name; });
               knob != std::end(kAutotuneCounts)) {
      const std::string flag = absl::StrReplaceAll(name, {{"_", "-"}});
      if (absl::Status s = CheckCount(flag, value, knob->max, knob->min); !s.ok()) return s;
      out.env.push_back(absl::StrCat(knob->variable, "=", value));
      if (!autotune_knob) autotune_knob = "--" + flag;
    } else if (name == "stall_check_warning_time_seconds") {
      if (absl::Status s = CheckSeconds(name, value); !s.ok()) return s;
      out.argv.push_back(absl::StrCat("--kolod_arg=--stall_warning_s=", value));
      out.notes.push_back(absl::StrCat("--stall-check-warning-time-seconds ", value,
                                       ": kolod --stall_warning_s=", value, kPrivateOnly));
    } else if (name == "stall_check_shutdown_time_seconds") {
      if (absl::Status s = CheckSeconds(name, value); !s.ok()) return s;
      out.argv.push_back(absl::StrCat("--kolod_arg=--stall_timeout_s=", value));
      out.notes.push_back(absl::StrCat("--stall-check-shutdown-time-seconds ", value,
                                       ": kolod --stall_timeout_s=", value, kPrivateOnly));
    } else if (name == "config_file") {
      return absl::InvalidArgumentError(
          "--config-file: kolorun reads no YAML; run the same command line with `horovodrun` "
          "(installed by Kolo's Python package), which reads the file into these flags");
    }
  }
  if (autotune_knob.has_value() && !autotune) {
    out.notes.push_back(absl::StrCat(*autotune_knob,
                                     ": the --autotune-* settings change nothing without "
                                     "--autotune (KOLO_AUTOTUNE=1)"));
  }
  return out;
}

std::string CheckBuildReport() {
  // The device backend kolod is built with in this Bazel configuration
  // (daemon/backend/BUILD.bazel chooses it the same way).
  constexpr int kNccl = KOLO_NCCL_VERSION_CODE;
  const std::string device =
      kNccl == 0 ? std::string("    [ ] NCCL\n    [ ] CUDA (built without CUDA and NCCL)\n")
                 : absl::StrCat("    [X] NCCL ", kNccl / 10000, ".", kNccl / 100 % 100, ".",
                                kNccl % 100,
                                " (kolod's device backend; libnccl and a GPU are needed at run "
                                "time)\n"
                                "    [X] CUDA (device tensors through kolod)\n");
  return absl::StrCat(
      "Kolo (kolorun):\n\n"
      "Available Frameworks:\n"
      "    (kolorun cannot see the Python package: run `horovodrun --check-build`)\n\n"
      "Available Controllers:\n"
      "    [X] kolod (Kolo's per-node daemon)\n"
      "    [ ] MPI\n"
      "    [ ] Gloo\n\n"
      "Available Tensor Operations:\n"
      "    [X] CPU (kolod's host backends)\n",
      device,
      "    [X] UCX (kolod's data transport between nodes)\n"
      "    [ ] DDL\n"
      "    [ ] CCL\n"
      "    (as built in this Bazel configuration, alongside this kolorun)\n");
}

}  // namespace kolo::kolorun
