// koloctl: the operator CLI of kolod. See UsageText() in cli.cc.
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/handoff.h"
#include "koloctl/cli.h"
#include "koloctl/connect.h"
#include "proto/kolo/v1/status.grpc.pb.h"

using kolo::koloctl::Command;
using kolo::koloctl::Environment;
using kolo::koloctl::Invocation;
using kolo::koloctl::kExitFailed;
using kolo::koloctl::kExitOk;
using kolo::koloctl::kExitUnreachable;
using kolo::koloctl::kExitUsage;

namespace {

std::optional<std::string> GetEnv(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

std::string Describe(const absl::Status& status) {
  return absl::StrCat(absl::StatusCodeToString(status.code()), ": ", status.message());
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  const Environment env{GetEnv("KOLO_SOCKET"), GetEnv("KOLO_ADMIN_TOKEN")};

  absl::StatusOr<Invocation> inv = kolo::koloctl::ParseCommandLine(args, env);
  if (!inv.ok()) {
    if (absl::IsInvalidArgument(inv.status())) {
      std::cerr << "koloctl: " << inv.status().message() << "\n\n" << kolo::koloctl::UsageText();
      return kExitUsage;
    }
    std::cerr << "koloctl: " << inv.status().message() << "\n";
    return kExitFailed;
  }
  if (inv->command == Command::kHelp) {
    std::cout << kolo::koloctl::UsageText();
    return kExitOk;
  }

  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      kolo::koloctl::Connect(inv->target, inv->options.timeout);
  if (!channel.ok()) {
    std::cerr << "koloctl: " << channel.status().message() << "\n";
    return kExitUnreachable;
  }
  if (!inv->socket_path.empty() && absl::StartsWith(inv->target, "unix:")) {
    // Who this user is, from the kernel: kolod then shows their own jobs.
    // Without it (an older kolod) the calls still go out and show what
    // kolod shows anyone.
    auto ticket =
        kolo::HandOff(kolo::HandoffSocketPath(inv->socket_path), -1, inv->options.timeout);
    if (ticket.ok()) inv->options.identity_ticket = *ticket;
  }
  auto status_stub = kolo::v1::Status::NewStub(*channel);
  auto admin_stub = kolo::v1::Admin::NewStub(*channel);
  const absl::Status result = kolo::koloctl::Execute(
      *inv, kolo::koloctl::Stubs{status_stub.get(), admin_stub.get()}, std::cout);
  std::cout.flush();
  if (!result.ok()) {
    std::cerr << "koloctl: " << Describe(result) << "\n";
    return kExitFailed;
  }
  return std::cout ? kExitOk : kExitFailed;
}
