// koloctl's command line: parsing argv and the environment into one
// Invocation (done once, in main), the usage text, the admin token lookup,
// and running a parsed Invocation against a kolod's stubs.
//
// Thread-safety: the functions are thread-safe; they keep no state.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "koloctl/commands.h"

namespace kolo::koloctl {

// Process exit codes. 64 is EX_USAGE from sysexits.h.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;       // the daemon or the command failed
inline constexpr int kExitUnreachable = 2;  // no kolod answering
inline constexpr int kExitUsage = 64;       // bad command line

inline constexpr char kDefaultSocket[] = "/run/kolo/kolod.sock";
inline constexpr char kAdminTokenFileName[] = "admin.token";
inline constexpr char kDefaultTimelineFile[] = "kolo-timeline.json";

// The KOLO_* environment variables koloctl reads; main reads them once.
struct Environment {
  std::optional<std::string> kolo_socket;       // KOLO_SOCKET
  std::optional<std::string> kolo_admin_token;  // KOLO_ADMIN_TOKEN
};

enum class Command {
  kHelp,
  kStatus,
  kJobs,
  kJob,
  kStalls,
  kMetrics,
  kTimelineStart,
  kTimelineStop,
  kAbort,
  kDrain,
  kLogLevel,
};

// Whether `command` is a kolo.v1.Admin call (needs the admin token).
bool IsAdminCommand(Command command);

struct Invocation {
  Command command = Command::kHelp;
  // The gRPC target: "unix:<socket_path>" or the --address.
  std::string target;
  // --socket, else KOLO_SOCKET, else kDefaultSocket; also where the admin
  // token is looked for when no other source gives one.
  std::string socket_path;
  CommandOptions options;                       // admin_token is set only for admin commands
  std::string job_id;                           // job, abort
  std::string reason;                           // abort --reason
  std::string level;                            // loglevel
  uint64_t max_events = 0;                      // timeline start --max_events
  std::string out_path = kDefaultTimelineFile;  // timeline stop --out
};

// Parses the arguments after the program name. Global flags may come before
// or after the command; a command's own flags only with it; "--" ends the
// flags. Bad command lines are INVALID_ARGUMENT (exit kExitUsage); a missing
// or unreadable admin token for an admin command is UNAUTHENTICATED or the
// error of reading its file (exit kExitFailed).
absl::StatusOr<Invocation> ParseCommandLine(const std::vector<std::string>& args,
                                            const Environment& env);

// The admin token and where it came from, in this order: `flag_token`,
// `flag_file`, `env.kolo_admin_token`, then the file admin.token in the
// directory of `socket_path` (kolod writes it there, mode 0600). Token files
// are read whole, surrounding whitespace removed. The error of a miss names
// every place looked at.
struct AdminToken {
  std::string token;
  std::string source;
};
absl::StatusOr<AdminToken> ResolveAdminToken(const std::optional<std::string>& flag_token,
                                             const std::optional<std::string>& flag_file,
                                             const Environment& env,
                                             const std::string& socket_path);

// Commands and flags, for --help and usage errors.
std::string UsageText();

// Runs the parsed command (not kHelp) against `stubs`, printing to `out`.
absl::Status Execute(const Invocation& invocation, const Stubs& stubs, std::ostream& out);

}  // namespace kolo::koloctl
