// Translates horovodrun's flags into kolorun's, so that a horovodrun command
// line runs under kolorun with Horovod's meaning where Kolo has it.
//
//   kolorun -np 2 --fusion-threshold-mb 32 --timeline-filename /tmp/t.json
//       -p 2222 python3 train.py --epochs 3
//     argv:  {"kolorun", "-np", "2", "--ssh_arg=-p", "--ssh_arg=2222", "--",
//             "python3", "train.py", "--epochs", "3"}
//     env:   {"KOLO_FUSION_THRESHOLD=33554432", "KOLO_TIMELINE=/tmp/t.json"}
//
// Each horovodrun flag is either mapped (to a kolorun flag, a flag of the
// private kolod kolorun starts, or a KOLO_* variable the ranks read: KOLO_*
// rather than HOROVOD_*, since only KOLO_* variables reach ranks on other
// hosts and a KOLO_* one wins over a HOROVOD_* one already set), or
// accepted with a note saying why it changes nothing here, or refused with an
// error; docs/horovodrun.md has the table. Flags that are not horovodrun's
// pass unchanged. As with horovodrun, the command starts at the first word
// that is neither a flag nor a flag's value; a "--" is put before it.
//
// Thread-safety: a pure function (but for `read_file`); safe from any thread.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kolo::kolorun {

struct HorovodTranslation {
  // argv for SplitCommandLine: argv[0], kolorun's flags, "--", the command.
  std::vector<std::string> argv;
  // NAME=VALUE entries for the ranks' (and a private kolod's) environment.
  std::vector<std::string> env;
  // One line each, for stderr: what an accepted flag means here.
  std::vector<std::string> notes;
  bool check_build = false;  // --check-build: print the build and exit.
  bool verbose = false;      // --verbose: print the translated command line.
};

// `is_bool_flag(name)` says whether kolorun's flag `name` (spelled with '_')
// takes no value, so that the word after it is not taken as its value.
// `read_file(path)` returns a file's contents (for --hostfile).
absl::StatusOr<HorovodTranslation> TranslateHorovodFlags(
    const std::vector<std::string>& argv, const std::function<bool(absl::string_view)>& is_bool_flag,
    const std::function<absl::StatusOr<std::string>(const std::string&)>& read_file);

// A Horovod hostfile ("HOST slots=N" a line, or "HOST:N" or "HOST"; blank
// lines and # comments ignored) as kolorun's -H list "HOST:N,...".
absl::StatusOr<std::string> HostfileToHostList(absl::string_view contents);

// What kolorun knows it was built with, for --check-build.
std::string CheckBuildReport();

}  // namespace kolo::kolorun
