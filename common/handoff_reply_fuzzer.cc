// Fuzzes the client's parsing of kolod's handoff reply (ParseHandoffReply)
// with arbitrary bytes, and checks the round trip of the reply formats: a
// ticket and an error status from the input come back as they were sent.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "common/handoff.h"
#include "tools/fuzz/fuzz_input.h"

namespace kolo {
namespace {

void Run(fuzz::FuzzInput& in) {
  const uint8_t mode = in.Take<uint8_t>();
  if (mode % 3 == 0) {
    absl::StatusOr<std::string> r = ParseHandoffReply(in.TakeRest());
    if (r.ok()) fuzz::Require(r->size() == kHandoffTicketChars);
    return;
  }
  if (mode % 3 == 1) {
    std::string ticket = in.TakeString(kHandoffTicketChars);
    absl::StatusOr<std::string> r = ParseHandoffReply(HandoffOkReply(ticket));
    fuzz::Require(r.ok() == (ticket.size() == kHandoffTicketChars));
    if (r.ok()) fuzz::Require(*r == ticket);
    return;
  }
  // An error: any code but OK, any message.
  int code = 1 + in.Take<uint8_t>() % 16;
  std::string message = in.TakeRest();
  absl::Status sent(static_cast<absl::StatusCode>(code), message);
  absl::StatusOr<std::string> r = ParseHandoffReply(HandoffErrorReply(sent));
  fuzz::Require(!r.ok());
  fuzz::Require(r.status().code() == sent.code());
  fuzz::Require(absl::StartsWith(message, r.status().message()) ||
                absl::StrContains(r.status().message(), "malformed"));
}

}  // namespace
}  // namespace kolo

KOLO_FUZZ_TARGET(kolo::Run)
