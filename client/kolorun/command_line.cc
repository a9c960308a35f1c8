#include "client/kolorun/command_line.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace kolo::kolorun {
namespace {

// `arg` with its flag name spelled with '_' for '-', when that names one of
// `flag_names`; else `arg`.
std::string UnderscoreSpelling(const std::string& arg, const std::vector<std::string>& flag_names) {
  absl::string_view rest = arg;
  if (!absl::ConsumePrefix(&rest, "--") && !absl::ConsumePrefix(&rest, "-")) return arg;
  const absl::string_view name = rest.substr(0, rest.find('='));
  if (!absl::StrContains(name, '-')) return arg;
  std::string underscored(name);
  std::replace(underscored.begin(), underscored.end(), '-', '_');
  if (std::find(flag_names.begin(), flag_names.end(), underscored) == flag_names.end()) return arg;
  const size_t dashes = arg.size() - rest.size();
  return absl::StrCat(arg.substr(0, dashes), underscored, rest.substr(name.size()));
}

}  // namespace

absl::StatusOr<CommandLine> SplitCommandLine(const std::vector<std::string>& argv,
                                             const std::vector<std::string>& flag_names) {
  CommandLine out;
  const std::pair<absl::string_view, std::vector<std::string>*> repeatable[] = {
      {"kolod_arg", &out.kolod_args}, {"ssh_arg", &out.ssh_args}};
  size_t i = 0;
  if (!argv.empty()) out.flag_args.push_back(argv[i++]);
  for (; i < argv.size(); ++i) {
    const std::string word = UnderscoreSpelling(argv[i], flag_names);
    absl::string_view arg = word;
    if (arg == "--") {
      out.command.assign(argv.begin() + static_cast<std::ptrdiff_t>(i) + 1, argv.end());
      break;
    }
    absl::string_view dashless = arg;
    if (!absl::ConsumePrefix(&dashless, "--")) absl::ConsumePrefix(&dashless, "-");
    bool taken = false;
    for (const auto& [flag, values] : repeatable) {
      absl::string_view name = dashless;
      if (dashless.size() == arg.size() || !absl::ConsumePrefix(&name, flag)) {
        continue;
      }
      if (absl::ConsumePrefix(&name, "=")) {
        values->emplace_back(name);
        taken = true;
      } else if (name.empty()) {
        if (i + 1 >= argv.size() || argv[i + 1] == "--") {
          return absl::InvalidArgumentError(absl::StrCat("--", flag, " needs a value"));
        }
        values->push_back(argv[++i]);
        taken = true;
      }
      // Otherwise some other flag, e.g. --kolod_argx.
      break;
    }
    if (!taken) out.flag_args.emplace_back(arg);
  }
  return out;
}

}  // namespace kolo::kolorun
