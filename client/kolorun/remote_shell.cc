#include "client/kolorun/remote_shell.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace kolo::kolorun {
namespace {

bool IsShellSafe(char c) {
  if (absl::ascii_isalnum(static_cast<unsigned char>(c))) return true;
  switch (c) {
    case '_':
    case '@':
    case '%':
    case '+':
    case '=':
    case ':':
    case ',':
    case '.':
    case '/':
    case '-':
      return true;
    default:
      return false;
  }
}

}  // namespace

std::string ShellQuote(const std::string& word) {
  bool safe = !word.empty();
  for (char c : word) safe = safe && IsShellSafe(c);
  if (safe) return word;
  // Inside single quotes a POSIX shell takes every byte literally, newlines
  // included; only ' itself must leave the quotes: '\''.
  std::string out = "'";
  for (char c : word) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += '\'';
  return out;
}

std::vector<std::string> SshArgv(const SshCommand& command) {
  std::vector<std::string> argv = {command.ssh_program, "-o", "BatchMode=yes"};
  argv.insert(argv.end(), command.ssh_args.begin(), command.ssh_args.end());
  argv.push_back(command.host);
  argv.push_back("exec");
  argv.push_back("env");
  for (const std::string& entry : command.env) argv.push_back(ShellQuote(entry));
  for (const std::string& word : command.command) {
    argv.push_back(ShellQuote(word));
  }
  return argv;
}

std::string RemoteCommandError(const std::vector<std::string>& command) {
  if (command.empty()) return "no command to run";
  const std::string& program = command[0];
  if (program.find('=') != std::string::npos) {
    return absl::StrCat("the command `", program, "` contains '=', which env ",
                        "on the remote host would take for a variable");
  }
  if (!program.empty() && program[0] == '-') {
    return absl::StrCat("the command `", program, "` starts with '-', which ",
                        "env on the remote host would take for an option");
  }
  return "";
}

}  // namespace kolo::kolorun
