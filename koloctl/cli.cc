#include "koloctl/cli.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/status_macros.h"

namespace kolo::koloctl {
namespace {

absl::Status Usage(const std::string& what) { return absl::InvalidArgumentError(what); }

// The flags seen on the command line, before defaults and validation.
struct RawFlags {
  std::optional<std::string> socket;
  std::optional<std::string> address;
  std::optional<std::string> timeout_s;
  std::optional<std::string> admin_token;
  std::optional<std::string> admin_token_file;
  std::optional<std::string> max_events;
  std::optional<std::string> out;
  std::optional<std::string> reason;
  bool json = false;
  bool help = false;
};

// Flags that take a value, and where it goes.
std::optional<std::string>* ValueFlag(RawFlags& flags, const std::string& name) {
  if (name == "socket") return &flags.socket;
  if (name == "address") return &flags.address;
  if (name == "timeout_s") return &flags.timeout_s;
  if (name == "admin_token") return &flags.admin_token;
  if (name == "admin_token_file") return &flags.admin_token_file;
  if (name == "max_events") return &flags.max_events;
  if (name == "out") return &flags.out;
  if (name == "reason") return &flags.reason;
  return nullptr;
}

absl::Status SplitFlags(const std::vector<std::string>& args, RawFlags& flags,
                        std::vector<std::string>& positional) {
  bool flags_ended = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (flags_ended || arg.size() < 2 || arg[0] != '-') {
      positional.push_back(arg);
      continue;
    }
    if (arg == "--") {
      flags_ended = true;
      continue;
    }
    if (arg == "-h" || arg == "--help" || arg == "-help") {
      flags.help = true;
      continue;
    }
    if (!absl::StartsWith(arg, "--")) return Usage(absl::StrCat("unknown flag ", arg));
    std::string name = arg.substr(2);
    std::optional<std::string> value;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
    }
    if (name == "json") {
      if (!value || *value == "true") {
        flags.json = true;
      } else if (*value == "false") {
        flags.json = false;
      } else {
        return Usage(absl::StrCat("--json takes true or false, not \"", *value, "\""));
      }
      continue;
    }
    std::optional<std::string>* slot = ValueFlag(flags, name);
    if (slot == nullptr) return Usage(absl::StrCat("unknown flag --", name));
    if (!value) {
      if (i + 1 >= args.size()) return Usage(absl::StrCat("--", name, " needs a value"));
      value = args[++i];
    }
    *slot = std::move(value);
  }
  return absl::OkStatus();
}

absl::Status ExpectArgs(const std::vector<std::string>& positional, size_t count,
                        const char* usage) {
  if (positional.size() != count) {
    return Usage(absl::StrCat("usage: koloctl [flags] ", usage));
  }
  return absl::OkStatus();
}

// A command-specific flag given to another command.
absl::Status OnlyWith(const std::optional<std::string>& flag, const char* name, const char* command,
                      bool allowed) {
  if (flag && !allowed) return Usage(absl::StrCat("--", name, " applies only to ", command));
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    const int err = errno;
    std::string what =
        absl::StrCat("cannot read admin token file ", path, ": ", std::strerror(err));
    if (err == EACCES) return absl::PermissionDeniedError(what);
    if (err == ENOENT) return absl::NotFoundError(what);
    return absl::UnavailableError(what);
  }
  std::stringstream content;
  content << file.rdbuf();
  std::string token(absl::StripAsciiWhitespace(content.str()));
  if (token.empty()) {
    return absl::UnauthenticatedError(absl::StrCat("admin token file ", path, " is empty"));
  }
  return token;
}

std::string SocketDirectory(const std::string& socket_path) {
  const size_t slash = socket_path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return socket_path.substr(0, slash);
}

}  // namespace

bool IsAdminCommand(Command command) {
  return command == Command::kAbort || command == Command::kDrain || command == Command::kLogLevel;
}

absl::StatusOr<AdminToken> ResolveAdminToken(const std::optional<std::string>& flag_token,
                                             const std::optional<std::string>& flag_file,
                                             const Environment& env,
                                             const std::string& socket_path) {
  if (flag_token) {
    if (flag_token->empty()) return Usage("--admin_token is empty");
    return AdminToken{*flag_token, "--admin_token"};
  }
  if (flag_file) {
    absl::StatusOr<std::string> token = ReadTokenFile(*flag_file);
    if (!token.ok()) return token.status();
    return AdminToken{*std::move(token), *flag_file};
  }
  if (env.kolo_admin_token && !env.kolo_admin_token->empty()) {
    return AdminToken{*env.kolo_admin_token, "KOLO_ADMIN_TOKEN"};
  }
  const std::string path = absl::StrCat(SocketDirectory(socket_path), "/", kAdminTokenFileName);
  absl::StatusOr<std::string> token = ReadTokenFile(path);
  if (token.ok()) return AdminToken{*std::move(token), path};
  return absl::UnauthenticatedError(absl::StrCat(
      "no admin token: no --admin_token or --admin_token_file, KOLO_ADMIN_TOKEN is not set, "
      "and ",
      token.status().message(),
      " (kolod writes it beside its socket, readable by kolod's user only: run as that user "
      "or root, or pass --admin_token_file)"));
}

absl::StatusOr<Invocation> ParseCommandLine(const std::vector<std::string>& args,
                                            const Environment& env) {
  RawFlags flags;
  std::vector<std::string> positional;
  KOLO_RETURN_IF_ERROR(SplitFlags(args, flags, positional));

  Invocation inv;
  if (flags.help || positional.empty() || positional[0] == "help") {
    if (!flags.help && positional.empty()) return Usage("no command given");
    inv.command = Command::kHelp;
    return inv;
  }

  const std::string name = positional[0];
  positional.erase(positional.begin());
  absl::Status s;
  if (name == "status") {
    inv.command = Command::kStatus;
    s = ExpectArgs(positional, 0, "status");
  } else if (name == "jobs") {
    inv.command = Command::kJobs;
    s = ExpectArgs(positional, 0, "jobs");
  } else if (name == "job") {
    inv.command = Command::kJob;
    s = ExpectArgs(positional, 1, "job ID");
    if (s.ok()) inv.job_id = positional[0];
  } else if (name == "stalls") {
    inv.command = Command::kStalls;
    s = ExpectArgs(positional, 0, "stalls");
  } else if (name == "metrics") {
    inv.command = Command::kMetrics;
    s = ExpectArgs(positional, 0, "metrics");
  } else if (name == "timeline") {
    s = ExpectArgs(positional, 1, "timeline start [--max_events N] | timeline stop [--out FILE]");
    if (s.ok() && positional[0] == "start") {
      inv.command = Command::kTimelineStart;
    } else if (s.ok() && positional[0] == "stop") {
      inv.command = Command::kTimelineStop;
    } else if (s.ok()) {
      s = Usage(absl::StrCat("timeline takes start or stop, not \"", positional[0], "\""));
    }
  } else if (name == "abort") {
    inv.command = Command::kAbort;
    s = ExpectArgs(positional, 1, "abort JOB [--reason TEXT]");
    if (s.ok()) inv.job_id = positional[0];
  } else if (name == "drain") {
    inv.command = Command::kDrain;
    s = ExpectArgs(positional, 0, "drain");
  } else if (name == "loglevel") {
    inv.command = Command::kLogLevel;
    s = ExpectArgs(positional, 1, "loglevel trace|debug|info|warn|error|off");
    if (s.ok()) inv.level = positional[0];
  } else {
    s = Usage(absl::StrCat("unknown command \"", name, "\""));
  }
  if (!s.ok()) return s;
  if (inv.job_id.empty() && (inv.command == Command::kJob || inv.command == Command::kAbort)) {
    return Usage("the job id is empty");
  }
  if (inv.level.empty() && inv.command == Command::kLogLevel) return Usage("the level is empty");

  KOLO_RETURN_IF_ERROR(OnlyWith(flags.max_events, "max_events", "timeline start",
                                inv.command == Command::kTimelineStart));
  KOLO_RETURN_IF_ERROR(
      OnlyWith(flags.out, "out", "timeline stop", inv.command == Command::kTimelineStop));
  KOLO_RETURN_IF_ERROR(OnlyWith(flags.reason, "reason", "abort", inv.command == Command::kAbort));
  if (flags.max_events && !absl::SimpleAtoi(*flags.max_events, &inv.max_events)) {
    return Usage(absl::StrCat("--max_events takes a count, not \"", *flags.max_events, "\""));
  }
  if (flags.out) {
    if (flags.out->empty()) return Usage("--out is empty");
    inv.out_path = *flags.out;
  }
  if (flags.reason) inv.reason = *flags.reason;

  inv.options.json = flags.json;
  if (flags.timeout_s) {
    double seconds = 0;
    if (!absl::SimpleAtod(*flags.timeout_s, &seconds) || !(seconds > 0) || seconds > 1e6) {
      return Usage(absl::StrCat("--timeout_s takes seconds > 0, not \"", *flags.timeout_s, "\""));
    }
    inv.options.timeout = absl::Seconds(seconds);
  }

  if (flags.socket) {
    if (flags.socket->empty()) return Usage("--socket is empty");
    inv.socket_path = *flags.socket;
  } else if (env.kolo_socket && !env.kolo_socket->empty()) {
    inv.socket_path = *env.kolo_socket;
  } else {
    inv.socket_path = kDefaultSocket;
  }
  if (flags.address) {
    if (flags.address->empty()) return Usage("--address is empty");
    inv.target = *flags.address;
  } else {
    inv.target = absl::StrCat("unix:", inv.socket_path);
  }

  if (IsAdminCommand(inv.command)) {
    absl::StatusOr<AdminToken> token =
        ResolveAdminToken(flags.admin_token, flags.admin_token_file, env, inv.socket_path);
    if (!token.ok()) return token.status();
    inv.options.admin_token = std::move(token->token);
    inv.options.admin_token_source = std::move(token->source);
  }
  return inv;
}

std::string UsageText() {
  return absl::StrCat(
      "usage: koloctl [--socket PATH | --address HOST:PORT] [--json] [--timeout_s N]\n"
      "               [--admin_token TOKEN | --admin_token_file PATH] COMMAND [ARGS]\n"
      "\n"
      "Queries and controls the node's kolod over gRPC.\n"
      "\n"
      "commands:\n"
      "  status                        node facts and one line per job\n"
      "  jobs                          table of jobs: size, state, ranks attached, responses,\n"
      "                                bytes, throughput, pending tensors\n"
      "  job ID                        one job: ranks, pending tensors, stalls, recent\n"
      "                                collectives, errors\n"
      "  stalls                        tensors waiting longer than the stall warning\n"
      "  metrics                       the Prometheus text exposition\n"
      "  timeline start [--max_events N]\n"
      "                                start recording a timeline (0: daemon default)\n"
      "  timeline stop [--out FILE]    stop it and write the trace JSON to FILE\n"
      "                                (default ./",
      kDefaultTimelineFile,
      ")\n"
      "  abort JOB [--reason TEXT]     admin: fail every collective of JOB with ABORTED\n"
      "  drain                         admin: refuse new jobs; running jobs finish\n"
      "  loglevel LEVEL                admin: trace, debug, info, warn, error or off\n"
      "  help                          this text\n"
      "\n"
      "flags:\n"
      "  --socket PATH            kolod's Unix socket (default: $KOLO_SOCKET, else ",
      kDefaultSocket,
      ")\n"
      "  --address HOST:PORT      kolod's status TCP address; wins over --socket\n"
      "  --json                   print the response message as JSON (proto field names)\n"
      "  --timeout_s N            deadline of the connection and of each call (default 10)\n"
      "  --admin_token TOKEN      admin token for abort, drain and loglevel\n"
      "  --admin_token_file PATH  file holding it; without either, $KOLO_ADMIN_TOKEN, else\n"
      "                           the file ",
      kAdminTokenFileName, " beside the socket (e.g. /run/kolo/", kAdminTokenFileName,
      ")\n"
      "  --help                   this text\n"
      "\n"
      "exit status: 0 ok, 1 the daemon or command failed, 2 no kolod answering, 64 usage\n");
}

absl::Status Execute(const Invocation& inv, const Stubs& stubs, std::ostream& out) {
  const CommandOptions& o = inv.options;
  switch (inv.command) {
    case Command::kHelp:
      out << UsageText();
      return absl::OkStatus();
    case Command::kStatus:
      return RunStatus(stubs, o, out);
    case Command::kJobs:
      return RunJobs(stubs, o, out);
    case Command::kJob:
      return RunJob(stubs, o, inv.job_id, out);
    case Command::kStalls:
      return RunStalls(stubs, o, out);
    case Command::kMetrics:
      return RunMetrics(stubs, o, out);
    case Command::kTimelineStart:
      return RunTimelineStart(stubs, o, inv.max_events, out);
    case Command::kTimelineStop:
      return RunTimelineStop(stubs, o, inv.out_path, out);
    case Command::kAbort:
      return RunAbort(stubs, o, inv.job_id, inv.reason, out);
    case Command::kDrain:
      return RunDrain(stubs, o, out);
    case Command::kLogLevel:
      return RunLogLevel(stubs, o, inv.level, out);
  }
  return absl::InternalError("unhandled command");
}

}  // namespace kolo::koloctl
