// Splits kolorun's argv into its own flags, the values of the repeatable
// --kolod_arg and --ssh_arg flags, and the command the ranks run.
//
//   kolorun -np 2 --kolod_arg=--verbose --ssh_arg=-p --ssh_arg 2222 --
//       python3 train.py --epochs 3
//     flag_args:  {"kolorun", "-np", "2"}
//     kolod_args: {"--verbose"}
//     ssh_args:   {"-p", "2222"}
//     command:    {"python3", "train.py", "--epochs", "3"}
//
// It also lets kolorun's flags be spelled with '-' for '_' (--min-np).
//
// Thread-safety: a pure function; safe from any thread.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kolo::kolorun {

struct CommandLine {
  // argv[0] and kolorun's flags (and any positional arguments before "--"),
  // for absl::ParseCommandLine.
  std::vector<std::string> flag_args;
  // Each --kolod_arg value, in order. The flag is taken out here because a
  // flag library keeps only the last value of a repeated flag.
  std::vector<std::string> kolod_args;
  // Each --ssh_arg value, in order, likewise.
  std::vector<std::string> ssh_args;
  // Everything after the first "--", verbatim.
  std::vector<std::string> command;
};

// Accepts --kolod_arg=V, --kolod_arg V and the single-dash forms (and the
// same for --ssh_arg). INVALID_ARGUMENT when such a flag has no value.
//
// A flag before "--" whose name, with each '-' read as '_', is one of
// `flag_names` is rewritten to that name: with "min_np" among them,
// --min-np=2 becomes --min_np=2 (horovodrun spells its flags with dashes).
// Other words, flag values included, pass unchanged.
absl::StatusOr<CommandLine> SplitCommandLine(const std::vector<std::string>& argv,
                                             const std::vector<std::string>& flag_names = {});

}  // namespace kolo::kolorun
