#include "client/kolorun/discovery.h"

#include <errno.h>
#include <unistd.h>

#include <array>
#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kolo::kolorun {

absl::StatusOr<std::vector<HostSlots>> ParseDiscoveryOutput(absl::string_view text,
                                                            const std::string& this_host) {
  std::vector<HostSlots> hosts;
  std::map<std::string, int> line_of;  // Lower-cased host -> its line.
  int this_machine_line = 0;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = line.substr(0, line.find('#'));
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    const std::string context = absl::StrCat("discovery output line ", line_number);
    absl::StatusOr<HostSlots> entry = ParseHostEntry(line, context);
    if (!entry.ok()) return entry.status();
    const auto [it, inserted] = line_of.emplace(absl::AsciiStrToLower(entry->host), line_number);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat(context, " \"", line, "\": host ", entry->host,
                                                     " is already on line ", it->second));
    }
    if (IsThisMachine(entry->host, this_host)) {
      if (this_machine_line != 0) {
        return absl::InvalidArgumentError(absl::StrCat(context, " \"", line,
                                                       "\": this machine is already on line ",
                                                       this_machine_line, " under another name"));
      }
      this_machine_line = line_number;
    }
    hosts.push_back(*std::move(entry));
  }
  return hosts;
}

HostDiscovery::HostDiscovery(std::string script, std::vector<std::string> env,
                             std::string this_host, absl::Duration timeout)
    : script_(std::move(script)),
      env_(std::move(env)),
      this_host_(std::move(this_host)),
      timeout_(timeout) {}

// The child, if any, is killed and reaped by its own destructor.
HostDiscovery::~HostDiscovery() = default;

absl::StatusOr<UniqueFd> HostDiscovery::Start(Clock::time_point now) {
  if (child_ != nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("host discovery `", script_, "` is already running"));
  }
  absl::StatusOr<std::unique_ptr<Subprocess>> child =
      Subprocess::Spawn(SpawnOptions{.argv = {script_}, .env = env_});
  if (!child.ok()) return child.status();
  child_ = *std::move(child);
  stdout_ = std::move(child_->stdout_pipe());
  deadline_ = now + ToClock(timeout_);
  output_.clear();
  overflow_ = false;
  return std::move(child_->stderr_pipe());
}

std::vector<int> HostDiscovery::PollFds() const {
  std::vector<int> fds;
  if (child_ == nullptr) return fds;
  if (stdout_.valid()) fds.push_back(stdout_.get());
  if (child_->exit_fd() >= 0) fds.push_back(child_->exit_fd());
  return fds;
}

void HostDiscovery::ReadStdout() {
  std::array<char, 16 << 10> buf;
  while (stdout_.valid()) {
    const ssize_t n = ::read(stdout_.get(), buf.data(), buf.size());
    if (n > 0) {
      output_.append(buf.data(), static_cast<size_t>(n));
      if (output_.size() > kMaxOutputBytes) {
        overflow_ = true;
        stdout_.Reset();
      }
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return;
    } else {
      stdout_.Reset();  // EOF or a read error.
    }
  }
}

std::optional<absl::StatusOr<std::vector<HostSlots>>> HostDiscovery::Service(
    Clock::time_point now) {
  if (child_ == nullptr) return std::nullopt;
  ReadStdout();
  if (std::optional<ExitStatus> status = child_->TryReap()) {
    // What the script wrote before it exited is in the pipe by now; something
    // it left running may hold the pipe open, so do not wait for EOF.
    ReadStdout();
    return Finish(*status);
  }
  if (now < deadline_) return std::nullopt;
  child_.reset();  // Kills its process group and reaps it.
  stdout_.Reset();
  return absl::DeadlineExceededError(absl::StrCat("host discovery `", script_, "` ran longer than ",
                                                  absl::FormatDuration(timeout_), "; killed it"));
}

absl::StatusOr<std::vector<HostSlots>> HostDiscovery::Finish(const ExitStatus& status) {
  child_.reset();
  stdout_.Reset();
  const std::string output = std::exchange(output_, std::string());
  // Overflow first: closing the pipe on a script may well make it fail.
  if (overflow_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "host discovery `", script_, "` printed more than ", kMaxOutputBytes, " bytes"));
  }
  if (!status.success()) {
    return absl::UnavailableError(
        absl::StrCat("host discovery `", script_, "` ", status.Describe()));
  }
  absl::StatusOr<std::vector<HostSlots>> hosts = ParseDiscoveryOutput(output, this_host_);
  if (!hosts.ok()) {
    return absl::Status(hosts.status().code(),
                        absl::StrCat("host discovery `", script_, "`: ", hosts.status().message()));
  }
  return hosts;
}

}  // namespace kolo::kolorun
