// Building the ssh command line that starts one remote rank.
//
// ssh joins the words after the host with spaces and hands the result to the
// remote user's login shell, so every word is quoted here for a POSIX shell
// (sh, bash, dash, zsh; csh-family login shells are not supported).
//
// Thread-safety: pure functions; safe from any thread.
#pragma once

#include <string>
#include <vector>

namespace kolo::kolorun {

// `word` quoted so that a POSIX shell reads it back as exactly one word with
// the same bytes: unchanged when it is non-empty and made only of characters
// no shell treats specially ([A-Za-z0-9] and _@%+=:,./-), else in single
// quotes, each ' written as '\''. "" becomes ''.
std::string ShellQuote(const std::string& word);

struct SshCommand {
  std::string ssh_program = "ssh";
  std::vector<std::string> ssh_args;  // Placed before the host.
  std::string host;
  std::vector<std::string> env;      // "NAME=value" set for the command.
  std::vector<std::string> command;  // argv on the remote host; not empty.
};

// {ssh, -o, BatchMode=yes, ssh_args..., host, exec, env, 'NAME=value'...,
// 'command'...}: the remote shell replaces itself (exec) with env, which sets
// the variables and execs the command, so the rank is the session's process
// and its exit status is ssh's. env would take a command[0] that contains
// '=' for one more variable, or one that starts with '-' for an option:
// callers reject those (see RemoteCommandError).
std::vector<std::string> SshArgv(const SshCommand& command);

// Why `command` cannot be run through env on a remote host, or "" if it can.
std::string RemoteCommandError(const std::vector<std::string>& command);

}  // namespace kolo::kolorun
