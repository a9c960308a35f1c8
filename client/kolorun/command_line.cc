#include "client/kolorun/command_line.h"

#include "absl/strings/string_view.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace kolo::kolorun {

absl::StatusOr<CommandLine> SplitCommandLine(
    const std::vector<std::string>& argv) {
  CommandLine out;
  size_t i = 0;
  if (!argv.empty()) out.flag_args.push_back(argv[i++]);
  for (; i < argv.size(); ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") {
      out.command.assign(argv.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                         argv.end());
      break;
    }
    absl::string_view name = arg;
    if (!absl::ConsumePrefix(&name, "--")) absl::ConsumePrefix(&name, "-");
    if (name.size() == arg.size() || !absl::ConsumePrefix(&name, "kolod_arg")) {
      out.flag_args.emplace_back(arg);
      continue;
    }
    if (absl::ConsumePrefix(&name, "=")) {
      out.kolod_args.emplace_back(name);
    } else if (name.empty()) {
      if (i + 1 >= argv.size() || argv[i + 1] == "--") {
        return absl::InvalidArgumentError("--kolod_arg needs a value");
      }
      out.kolod_args.push_back(argv[++i]);
    } else {
      out.flag_args.emplace_back(arg);  // Some other flag, e.g. --kolod_argx.
    }
  }
  return out;
}

}  // namespace kolo::kolorun
